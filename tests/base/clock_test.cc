// SecondsSince / MsSince: the same interval in two units, never negative.
// No assertion depends on how fast the machine is: only on the steady
// clock not going backwards.
#include "base/clock.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ragkv {
namespace {

TEST(ClockTest, IntervalsAreOrderedAndInTheirUnits) {
  const Clock::time_point t0 = Clock::now();
  const double s1 = SecondsSince(t0);
  const double ms = MsSince(t0);
  const double s2 = SecondsSince(t0);
  EXPECT_GE(s1, 0.0);
  // Taken in this order, on a clock that never goes backwards (1e-9
  // relative slack: the two units round differently).
  EXPECT_LE(s1 * 1000.0, ms * (1 + 1e-9));
  EXPECT_LE(ms, s2 * 1000.0 * (1 + 1e-9));
}

TEST(ClockTest, CountsFromAPointInThePast) {
  const Clock::time_point t0 = Clock::now() - std::chrono::milliseconds(5250);
  EXPECT_GE(SecondsSince(t0), 5.25);
  EXPECT_GE(MsSince(t0), 5250.0);
  // A point in the future is a negative interval, not a wrapped one.
  EXPECT_LT(MsSince(Clock::now() + std::chrono::hours(1)), 0.0);
}

}  // namespace
}  // namespace ragkv
