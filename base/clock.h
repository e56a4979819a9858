// clock.h: wall-clock intervals on the steady clock, the one helper every
// module times stages with (was MsSince / Seconds, copied in ten files).
#ifndef RAGKV_BASE_CLOCK_H_
#define RAGKV_BASE_CLOCK_H_

#include <chrono>

namespace ragkv {

using Clock = std::chrono::steady_clock;

// SecondsSince / MsSince: the time elapsed since t0.
inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
inline double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace ragkv

#endif  // RAGKV_BASE_CLOCK_H_
