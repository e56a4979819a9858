// calibration.h: this CPU's roofline ceilings and the kernel rates of one
// transformer layer, measured for the cost model (cost_model.h): kernels::Gemm
// sgemm GFLOP/s on a big square, memcpy bandwidth, a cold sequential file
// read for the SSD tier, and the GEMM / attention / row-op / re-rotation /
// allocation rates at a model's shapes. Shared by `ragkv plan
// --calibrate-cpu` and `ragkv bench ttft`; ShapeOfConfig is the one mapping
// from a model config to a cost-model shape (the loading controller's
// ShapeOf uses it too).
//
// Thread safety: functions are reentrant; MeasureCpu uses the kernels'
// thread pool and a scratch file in `scratch_dir`.
#ifndef RAGKV_BLEND_CALIBRATION_H_
#define RAGKV_BLEND_CALIBRATION_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/cost_model.h"
#include "model/config.h"

namespace ragkv::blend {

// CpuCeilings: this machine's measured roofline ceilings.
struct CpuCeilings {
  double sgemm_flops = 0;     // FLOP/s of kernels::Gemm, n x n x n f32 (best of runs)
  double copy_bytes_per_s = 0;  // memcpy bandwidth, bytes copied per second (best of runs)
  double file_read_bytes_per_s = 0;  // cold sequential read (0: not measured)
  int gemm_n = 0;
  // Kernel rates at a model's shapes (MeasureCpu with CpuMeasureOptions::
  // model set; zero / empty otherwise). Same meaning and units as the
  // HardwareSpec fields of the same names.
  std::vector<std::pair<double, double>> gemm_flops_at_rows;  // (rows, FLOP/s)
  double attention_flops = 0;
  double row_op_bytes_per_s = 0;
  double rerotate_bytes_per_s = 0;
  double alloc_bytes_per_s = 0;
};

struct CpuMeasureOptions {
  int gemm_n = 1024;
  size_t copy_bytes = size_t{128} << 20;
  int runs = 3;
  // Cold file read for the SSD ceiling (0: skip): bytes written to a scratch
  // file in `scratch_dir`, dropped from the page cache (fadvise), read back.
  size_t file_bytes = size_t{64} << 20;
  std::string scratch_dir = "/tmp";
  // model: when layers > 0, also measure the kernels of one transformer layer
  // of this shape (random weights): the four projection GEMMs (q/k/v fused,
  // o, gate/up fused, down; trans_b, as model::Model) at each row count of
  // `gemm_rows`; SelectiveAttention of `attention_rows` rows scattered over
  // `attention_keys` keys; RMSNorm x2 + RoPE of q and k + SwiGLU + K/V copy
  // over `row_op_rows` rows; RerotateKeys of `attention_keys` keys; and
  // allocating + zero-filling `alloc_bytes`. Each kernel timing is the
  // median of `runs` (after a warm-up): the rates are meant to predict median
  // TTFTs on the same, possibly loaded, machine (the sgemm / memcpy ceilings
  // above stay best-of-runs).
  ModelShape model;
  std::vector<int> gemm_rows = {1, 8, 32, 128, 512, 2048};
  int attention_rows = 256;
  int attention_keys = 2048;
  int row_op_rows = 512;
  size_t alloc_bytes = size_t{96} << 20;
};

// MeasureCpu: the ceilings above. Errors: kernels::Gemm or scratch I/O.
absl::StatusOr<CpuCeilings> MeasureCpu(const CpuMeasureOptions& options = {});

// MedianCeilings: the field-wise median of several measurements (the GEMM
// table row by row; the tables must have the same row counts). Empty input:
// all zero.
CpuCeilings MedianCeilings(const std::vector<CpuCeilings>& samples);

// DescribeKernelRates: one line with the kernel rates of `c` (GFLOP/s, GB/s).
std::string DescribeKernelRates(const CpuCeilings& c);

// CpuHardwareSpec: "cpu" spec from measured ceilings: peak = efficiency x
// sgemm, mem_bw = ram tier = memcpy bandwidth, ssd = the file read (or
// memcpy/4 when not measured), remote = `remote_bytes_per_s` (0: memcpy/4);
// the kernel rates (GEMM by rows, attention, row ops, re-rotation,
// allocation) are copied as measured.
HardwareSpec CpuHardwareSpec(const CpuCeilings& c, double efficiency = 1.0,
                                    double remote_bytes_per_s = 0);

// ResolveModelShape: a preset name (ModelPreset) or a checkpoint /
// "synthetic:..." spec (config read with model::LoadModelParts). `f32`
// sets weight and KV bytes per element to 4 (the CPU runtime) -- presets
// keep bf16/fp16 otherwise; checkpoints get f32 weights and `kv_bytes` KV.
// ShapeOfConfig: the cost-model shape of a model config, with the given
// bytes per weight / KV element.
ModelShape ShapeOfConfig(const model::ModelConfig& c, const std::string& name,
                         int weight_bytes_per_elem, int kv_bytes_per_elem);

absl::StatusOr<ModelShape> ResolveModelShape(const std::string& model, bool f32,
                                                    int kv_bytes = 2);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_CALIBRATION_H_
