#include "blend/plan_roofline.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ragkv::blend {
namespace {

std::string Terminal() {
  static const std::string t =
      std::system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0 ? "pngcairo" : "png";
  return t;
}

// Quoted: a gnuplot single-quoted string ('' escapes a quote).
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

absl::Status WriteData(const Plan& plan, const std::string& path,
                       std::vector<std::string>* phases) {
  std::ofstream f(path);
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  std::string current;
  for (const RooflinePoint& p : RooflinePoints(plan)) {
    if (p.phase != current) {
      if (!current.empty()) f << "\n\n";
      current = p.phase;
      phases->push_back(p.phase);
    }
    f << absl::StrFormat("%.6g %.6g %s\n", p.intensity, p.flops_per_s / 1e9, p.op);
  }
  return f ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

// ByteOnly: "op (phase) x ms" of the operators without FLOPs (loads, collectives).
std::string ByteOnly(const Plan& plan) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const Phase& ph : plan.phases) {
    for (const OpCost& c : ph.ops) {
      if (c.flops > 0 || c.time_s <= 0 || !seen.insert(c.op).second) continue;
      out.push_back(absl::StrFormat("%s %.3g ms (%s)", c.op, c.time_s * 1e3, ph.name));
    }
  }
  return absl::StrJoin(out, ", ");
}

std::string Script(const Plan& plan, const std::string& png, const std::string& dat,
                   const std::vector<std::string>& phases) {
  const HardwareSpec& hw = plan.hardware;
  const double bw = hw.mem_bw / 1e9;  // GB/s: GFLOP/s per FLOP/byte
  std::string s = absl::StrFormat(
      "set terminal %s size 1200,800 font ',10' noenhanced\nset output %s\nset logscale xy\nset "
      "grid\n"
      "set xrange [0.1:100000]\nset xlabel 'arithmetic intensity (FLOP/byte)'\n"
      "set ylabel 'attained GFLOP/s (FLOPs / operator time)'\nset key bottom right\n"
      "set title %s noenhanced\nset label 1 %s at graph 0.01, graph -0.09 font ',8' noenhanced\n"
      "set bmargin 6\nbf16(x) = (x * %.6g < %.6g) ? x * %.6g : %.6g\n",
      Terminal(), Quoted(png),
      Quoted(absl::StrFormat("%s on %s: operators of every phase on the roofline "
                             "(%.0f TFLOP/s, %.0f GB/s)",
                             plan.shape.name, hw.name, hw.peak_flops / 1e12, bw)),
      Quoted(absl::StrCat("no FLOPs: ", ByteOnly(plan)).substr(0, 220)), bw, hw.peak_flops / 1e9,
      bw, hw.peak_flops / 1e9);
  s += "plot bf16(x) with lines lw 3 lc rgb 'black' title 'roof (dense BF16)'";
  if (hw.peak_fp8_flops > 0) {
    s += absl::StrFormat(
        ", ((x * %.6g < %.6g) ? x * %.6g : %.6g) with lines lw 2 dt 2 lc rgb 'gray' title "
        "'roof (dense FP8)'",
        bw, hw.peak_fp8_flops / 1e9, bw, hw.peak_fp8_flops / 1e9);
  }
  for (size_t i = 0; i < phases.size(); ++i) {
    s += absl::StrFormat(
        ", %s index %d using 1:2 with points pt %d ps 1.6 title %s noenhanced, %s index %d "
        "using 1:2:3 with labels offset 0.8,0.5 left font ',7' notitle noenhanced",
        Quoted(dat), i, 5 + static_cast<int>(i) % 9, Quoted(phases[i]), Quoted(dat), i);
  }
  return s + "\n";
}

}  // namespace

std::vector<RooflinePoint> RooflinePoints(const Plan& plan) {
  std::vector<RooflinePoint> out;
  for (const Phase& ph : plan.phases) {
    for (const OpCost& c : ph.ops) {
      if (c.flops <= 0 || c.time_s <= 0 || c.bytes <= 0) continue;
      out.push_back({ph.name, c.op, c.flops / c.bytes, c.flops / c.time_s});
    }
  }
  return out;
}

absl::Status WriteRoofline(const Plan& plan, const std::string& png_path) {
  const std::string dat = png_path + ".dat", gp = png_path + ".gp";
  std::vector<std::string> phases;
  if (absl::Status s = WriteData(plan, dat, &phases); !s.ok()) return s;
  {
    std::ofstream f(gp);
    f << Script(plan, png_path, dat, phases);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", gp));
  }
  const std::string cmd = absl::StrCat("gnuplot ", Quoted(gp), " 2>&1");
  const int rc = std::system(cmd.c_str());
  std::remove(dat.c_str());
  std::remove(gp.c_str());
  if (rc != 0) return absl::InternalError(absl::StrCat("roofline: gnuplot failed: ", cmd));
  return absl::OkStatus();
}

}  // namespace ragkv::blend
