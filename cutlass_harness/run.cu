// tileprobe runtime harness: launches one compiled grouped-GEMM config, checks it against an independent
// reference kernel, and times it, for each workload point of the problems file. One JSON object per point goes to
// stdout as soon as that point is done (flushed), so a later crash loses nothing; diagnostics go to stderr.
// The problems file holds lines 'M N K'; a line 'point R' starts a new point whose inputs rotate over R sets
// (a file without 'point' lines is one point, rotated over --rotate sets).
//
// Built with -DTP_FAMILY_KERNEL=<template from kernels.cuh> -DTP_ARCH=<90|120|121> and an include path holding
// tp_configs.inc, a generated file with exactly one TP_CFG(idx, TM, TN, TK, Sched, Stages, Epi, Swap) line.

// Device-side assert() in CUTLASS kernels is a function call that makes ptxas serialize wgmma (warning C7510) and
// skews timings; release builds of CUTLASS define NDEBUG, so this harness does too.
#ifndef NDEBUG
#define NDEBUG
#endif
#include <cuda_runtime.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels.cuh"

#ifndef TP_FAMILY_KERNEL
#error "TP_FAMILY_KERNEL must name a kernel template from kernels.cuh"
#endif
#ifndef TP_ARCH
#error "TP_ARCH must be the compute capability the binary is built for (90, 120, 121)"
#endif

#define TP_CFG(idx, tm, tn, tk, sched, stages, epi, swap)                     \
  using K = tileprobe::TP_FAMILY_KERNEL<tm, tn, tk, sched, stages, epi, swap>; \
  static constexpr int kCfgIndex = idx;
#include "tp_configs.inc"
#undef TP_CFG

// ---- Errors and JSON ----
struct Failure {  // thrown on the first failing step; main turns it into launch_status "launch-error"
  std::string reason;
};

void ck(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
    throw Failure{what + ": " + cudaGetErrorString(e)};
  }
}

std::string jstr(const std::string& s) {
  std::string out = "\"";
  char buf[8];
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c < 0x20) std::snprintf(buf, sizeof(buf), "\\u%04x", c), out += buf;
    else out += char(c);
  }
  return out + "\"";
}

std::string jnum(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

struct Json {
  std::string body;
  Json& add(const char* key, const std::string& raw) {
    body += (body.empty() ? "" : ", ") + jstr(key) + ": " + raw;
    return *this;
  }
  std::string str() const { return "{" + body + "}"; }
};

// CUTLASS status as its enumerator name (cutlassGetStatusString gives prose such as "Error Internal").
const char* status_name(cutlass::Status s) {
#define TP_STATUS(x) \
  case cutlass::Status::x: return #x;
  switch (s) {
    TP_STATUS(kSuccess) TP_STATUS(kErrorMisalignedOperand) TP_STATUS(kErrorInvalidDataType) TP_STATUS(kErrorInvalidLayout)
    TP_STATUS(kErrorInvalidProblem) TP_STATUS(kErrorNotSupported) TP_STATUS(kErrorWorkspaceNull) TP_STATUS(kErrorInternal)
    TP_STATUS(kErrorInsufficientDriver) TP_STATUS(kErrorArchMismatch) TP_STATUS(kErrorMemoryAllocation) TP_STATUS(kInvalid)
  }
#undef TP_STATUS
  return cutlassGetStatusString(s);
}

// ---- Options and problems ----
struct Options {
  std::string problems, dump_dir;
  uint64_t seed = 1;
  float alpha = 1.0f, beta = 0.5f;
  int warmup = 5, iters = 20, repeats = 5, rotate = 1, device = 0;
  double target_ms = 0;  // > 0: choose launches per repeat to fill about this much GPU time
  bool check = true;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "error: %s\nusage: harness --problems FILE [--seed S] [--alpha A] [--beta B] [--warmup W] "
               "[--iters I] [--target-ms T] [--repeats R] [--rotate N] [--no-check] [--device D] [--reference-dump DIR]\n", msg.c_str());
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i], val;
    if (key == "--no-check") { o.check = false; continue; }
    size_t eq = key.find('=');
    if (eq != std::string::npos) { val = key.substr(eq + 1); key = key.substr(0, eq); }
    else if (i + 1 < argc) { val = argv[++i]; }
    else usage("missing value for " + key);
    char* end = nullptr;
    auto num = [&](double lo) {
      double v = std::strtod(val.c_str(), &end);
      if (end == val.c_str() || *end || v < lo) usage("bad value for " + key + ": " + val);
      return v;
    };
    if (key == "--problems") o.problems = val;
    else if (key == "--reference-dump") o.dump_dir = val;
    else if (key == "--seed") o.seed = uint64_t(num(0));
    else if (key == "--alpha") o.alpha = float(num(-1e30));
    else if (key == "--beta") o.beta = float(num(-1e30));
    else if (key == "--warmup") o.warmup = int(num(0));
    else if (key == "--iters") o.iters = int(num(1));
    else if (key == "--target-ms") o.target_ms = num(0);
    else if (key == "--repeats") o.repeats = int(num(0));
    else if (key == "--rotate") o.rotate = int(num(1));
    else if (key == "--device") o.device = int(num(0));
    else usage("unknown option " + key);
  }
  if (o.problems.empty()) usage("--problems is required");
  return o;
}

struct Problem {
  int m, n, k;  // kernel space: A is MxK, B is NxK, D is MxN
};

struct PointSpec {
  std::vector<Problem> probs;
  int rotate;
};

std::vector<PointSpec> read_points(const std::string& path, int default_rotate) {
  std::ifstream in(path);
  if (!in) usage("cannot open problems file " + path);
  std::vector<PointSpec> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    long long m, n, k;
    int r;
    if (std::sscanf(line.c_str(), " point %d", &r) == 1) {
      if (r < 1) usage("bad 'point' line in " + path);
      out.push_back({{}, r});
    } else if (std::sscanf(line.c_str(), " %lld %lld %lld", &m, &n, &k) == 3) {
      if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) usage("bad problem line in " + path);
      if (out.empty()) out.push_back({{}, default_rotate});
      out.back().probs.push_back({int(m), int(n), int(k)});
    } else {
      usage("problems file " + path + " must hold lines of 'M N K' or 'point R'");
    }
  }
  if (out.empty()) usage("problems file " + path + " holds no problem");
  for (auto& p : out)
    if (p.probs.empty()) usage("a point in " + path + " holds no problem");
  return out;
}

// ---- Device-side data generation and decoding (independent of CUTLASS's own conversions) ----
__host__ __device__ inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

enum FillKind { kRawBytes = 0, kScaleBytes = 1, kFp8 = 2, kBf16 = 3 };

// kRawBytes: any byte (two e2m1 codes, all valid); kScaleBytes: ue4m3 with exponent field 6..9 (0.5 .. 7.5);
// kFp8: uniform [-2, 2] as e4m3; kBf16: uniform [-1, 1].
__global__ void fill_kernel(void* p, size_t n, uint64_t seed, int kind) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t r = mix64(seed ^ mix64(i));
    float u = float(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    switch (kind) {
      case kRawBytes: static_cast<uint8_t*>(p)[i] = uint8_t(r >> 24); break;
      case kScaleBytes: static_cast<uint8_t*>(p)[i] = uint8_t(((6 + ((r >> 32) & 3)) << 3) | ((r >> 40) & 7)); break;
      case kFp8: static_cast<uint8_t*>(p)[i] = cutlass::float_e4m3_t(-2.0f + 4.0f * u).storage; break;
      default: static_cast<cutlass::bfloat16_t*>(p)[i] = cutlass::bfloat16_t(-1.0f + 2.0f * u); break;
    }
  }
}

__device__ inline float decode_minifloat(int bits, int exp_bits, int man_bits, int bias) {  // no sign, no NaN
  int e = (bits >> man_bits) & ((1 << exp_bits) - 1), m = bits & ((1 << man_bits) - 1);
  float frac = float(m) / float(1 << man_bits);
  return e == 0 ? ldexpf(frac, 1 - bias) : ldexpf(1.0f + frac, e - bias);
}
__device__ inline float decode_e4m3(uint8_t b) {
  if ((b & 0x7F) == 0x7F) return NAN;
  float v = decode_minifloat(b & 0x7F, 4, 3, 7);
  return (b & 0x80) ? -v : v;
}
__device__ inline float decode_ue4m3(uint8_t b) { return decode_minifloat(b & 0x7F, 4, 3, 7); }
__device__ inline float decode_e2m1(uint8_t nib) {
  float v = decode_minifloat(nib & 7, 2, 1, 1);  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
  return (nib & 8) ? -v : v;
}

// Operand readers for the reference: A is MxK row-major, B is NxK with K contiguous.
struct Fp8Operands {
  const uint8_t *a, *b;
  int k;
  __device__ float A(int m, int kk) const { return decode_e4m3(a[size_t(m) * k + kk]); }
  __device__ float B(int n, int kk) const { return decode_e4m3(b[size_t(n) * k + kk]); }
};

template <class LayoutSFA, class LayoutSFB>
struct Nvfp4Operands {
  const uint8_t *a, *b, *sfa, *sfb;
  LayoutSFA lsfa;
  LayoutSFB lsfb;
  int k;
  // Packed e2m1: element i sits in byte i/2, low nibble first.
  __device__ static float nib(const uint8_t* p, size_t i) { return decode_e2m1((p[i >> 1] >> ((i & 1) * 4)) & 15); }
  // Scale factors are read through CUTLASS's own (swizzled, stride-0-within-16) layout.
  __device__ float A(int m, int kk) const {
    return nib(a, size_t(m) * k + kk) * decode_ue4m3(cute::make_tensor(sfa, lsfa)(m, kk, 0));
  }
  __device__ float B(int n, int kk) const {
    return nib(b, size_t(n) * k + kk) * decode_ue4m3(cute::make_tensor(sfb, lsfb)(n, kk, 0));
  }
};

// One thread per output element, fp32 accumulation; out is MxN row-major float, C follows D's layout.
template <class Ops>
__global__ void reference_kernel(Ops ops, int M, int N, int Kd, float alpha, float beta,
                                 const cutlass::bfloat16_t* C, bool col_major, float* out) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (int m = blockIdx.y; m < M; m += gridDim.y) {
    float acc = 0.0f;
    for (int kk = 0; kk < Kd; ++kk) acc += ops.A(m, kk) * ops.B(n, kk);
    float r = alpha * acc;
    if (C) r += beta * float(C[col_major ? size_t(n) * M + m : size_t(m) * N + n]);
    out[size_t(m) * N + n] = r;
  }
}

// ---- The harness for one kernel config ----
std::vector<void*> g_allocs;  // everything one point allocated, freed before the next point

void* dalloc(size_t bytes, const char* what) {
  void* p = nullptr;
  ck(cudaMalloc(&p, std::max<size_t>(bytes, 16)), std::string("cudaMalloc(") + what + ")");
  g_allocs.push_back(p);
  return p;
}

void free_point_allocs() {
  for (void* p : g_allocs) cudaFree(p);
  g_allocs.clear();
}

template <class T>
T* upload(const std::vector<T>& v, const char* what) {
  T* p = static_cast<T*>(dalloc(v.size() * sizeof(T), what));
  ck(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), std::string("cudaMemcpy(") + what + ")");
  return p;
}

// Scale-factor types exist only for block-scaled families; the placeholders keep the fp8 build from naming them.
template <class C, bool = C::BlockScaled>
struct SfTypes { using LA = int; using LB = int; };
template <class C>
struct SfTypes<C, true> { using LA = typename C::LayoutSFA; using LB = typename C::LayoutSFB; };

template <class Cfg>
struct Harness {
  using Gemm = typename Cfg::Gemm;
  using GemmKernel = typename Cfg::GemmKernel;
  using LSFA = typename SfTypes<Cfg>::LA;
  using LSFB = typename SfTypes<Cfg>::LB;
  using Shape3 = typename tileprobe::ProblemShape::UnderlyingProblemShape;
  static constexpr bool kHasC = !std::is_void_v<typename Cfg::ElementC>;
  static constexpr bool kDColMajor = std::is_same_v<typename Cfg::LayoutD, cutlass::layout::ColumnMajor>;
  // Only the family's own arch can launch it: an nvfp4 sm_90a build exists just to serve --reference-dump.
  static constexpr bool kLaunchable = Cfg::BlockScaled ? TP_ARCH >= 120 : TP_ARCH == 90;

  struct GroupBufs {
    uint8_t *a = nullptr, *b = nullptr, *sfa = nullptr, *sfb = nullptr;
    cutlass::bfloat16_t *c = nullptr, *d = nullptr;
    size_t a_bytes = 0, b_bytes = 0, sfa_bytes = 0, sfb_bytes = 0;
  };
  struct Set {
    std::vector<GroupBufs> g;
    void** ptrs[6] = {};  // device pointer arrays: A, B, SFA, SFB, C, D
    void* workspace = nullptr;
  };

  const Options& opt;
  int device, sm_count;
  std::vector<Problem> probs;
  std::vector<Shape3> h_shapes;
  std::vector<LSFA> h_lsfa;
  std::vector<LSFB> h_lsfb;
  Shape3* d_shapes = nullptr;
  typename GemmKernel::InternalStrideA* d_sa = nullptr;
  typename GemmKernel::InternalStrideB* d_sb = nullptr;
  typename GemmKernel::InternalStrideC* d_sc = nullptr;
  typename GemmKernel::InternalStrideD* d_sd = nullptr;
  LSFA* d_lsfa = nullptr;
  LSFB* d_lsfb = nullptr;
  std::vector<Set> sets;
  std::vector<Gemm> gemms;

  Harness(const Options& o, std::vector<Problem> p, int dev, int sms) : opt(o), device(dev), sm_count(sms), probs(std::move(p)) {}

  static void fill(void* p, size_t n, uint64_t seed, int kind) {
    if (n == 0) return;
    int blocks = int(std::min<size_t>((n + 255) / 256, 4096));
    fill_kernel<<<blocks, 256>>>(p, n, seed, kind);
    ck(cudaGetLastError(), "fill_kernel launch");
  }

  // Shapes, strides and SF layouts (shared by all sets), then nsets sets of operand buffers filled on device.
  void allocate(int nsets) {
    int G = int(probs.size());
    using SA = typename GemmKernel::InternalStrideA;
    using SB = typename GemmKernel::InternalStrideB;
    using SC = typename GemmKernel::InternalStrideC;
    using SD = typename GemmKernel::InternalStrideD;
    std::vector<SA> sa;
    std::vector<SB> sb;
    std::vector<SC> sc;
    std::vector<SD> sd;
    for (const Problem& p : probs) {
      h_shapes.push_back(cute::make_shape(p.m, p.n, p.k));
      sa.push_back(cutlass::make_cute_packed_stride(SA{}, cute::make_shape(p.m, p.k, 1)));
      sb.push_back(cutlass::make_cute_packed_stride(SB{}, cute::make_shape(p.n, p.k, 1)));
      sc.push_back(cutlass::make_cute_packed_stride(SC{}, cute::make_shape(p.m, p.n, 1)));
      sd.push_back(cutlass::make_cute_packed_stride(SD{}, cute::make_shape(p.m, p.n, 1)));
      if constexpr (Cfg::BlockScaled) {
        using SfCfg = typename Cfg::Sm1xxBlkScaledConfig;
        h_lsfa.push_back(SfCfg::tile_atom_to_shape_SFA(cute::make_shape(p.m, p.n, p.k, 1)));
        h_lsfb.push_back(SfCfg::tile_atom_to_shape_SFB(cute::make_shape(p.m, p.n, p.k, 1)));
      }
    }
    d_shapes = upload(h_shapes, "problem shapes");
    d_sa = upload(sa, "stride A");
    d_sb = upload(sb, "stride B");
    d_sc = upload(sc, "stride C");
    d_sd = upload(sd, "stride D");
    if constexpr (Cfg::BlockScaled) {
      d_lsfa = upload(h_lsfa, "layout SFA");
      d_lsfb = upload(h_lsfb, "layout SFB");
    }
    constexpr int bits_a = cutlass::sizeof_bits<typename Cfg::DataA>::value;
    constexpr int bits_b = cutlass::sizeof_bits<typename Cfg::DataB>::value;
    constexpr int data_kind = Cfg::BlockScaled ? kRawBytes : kFp8;
    sets.resize(nsets);
    for (int s = 0; s < nsets; ++s) {
      std::vector<void*> host_ptrs[6];
      for (int g = 0; g < G; ++g) {
        const Problem& p = probs[g];
        uint64_t seed = mix64((opt.seed + uint64_t(s)) * 0x100000001B3ull + uint64_t(g) * 16);
        GroupBufs b;
        b.a_bytes = (size_t(p.m) * p.k * bits_a + 7) / 8;
        b.b_bytes = (size_t(p.n) * p.k * bits_b + 7) / 8;
        b.a = static_cast<uint8_t*>(dalloc(b.a_bytes, "A"));
        b.b = static_cast<uint8_t*>(dalloc(b.b_bytes, "B"));
        fill(b.a, b.a_bytes, seed + 1, data_kind);
        fill(b.b, b.b_bytes, seed + 2, data_kind);
        if constexpr (Cfg::BlockScaled) {
          b.sfa_bytes = size_t(cute::size(cute::filter_zeros(h_lsfa[g]))) * sizeof(typename Cfg::ElementSF);
          b.sfb_bytes = size_t(cute::size(cute::filter_zeros(h_lsfb[g]))) * sizeof(typename Cfg::ElementSF);
          b.sfa = static_cast<uint8_t*>(dalloc(b.sfa_bytes, "SFA"));
          b.sfb = static_cast<uint8_t*>(dalloc(b.sfb_bytes, "SFB"));
          fill(b.sfa, b.sfa_bytes, seed + 3, kScaleBytes);
          fill(b.sfb, b.sfb_bytes, seed + 4, kScaleBytes);
        }
        size_t mn = size_t(p.m) * p.n;
        if (kHasC) {
          b.c = static_cast<cutlass::bfloat16_t*>(dalloc(mn * 2, "C"));
          fill(b.c, mn, seed + 5, kBf16);
        }
        b.d = static_cast<cutlass::bfloat16_t*>(dalloc(mn * 2, "D"));
        ck(cudaMemset(b.d, 0, mn * 2), "cudaMemset(D)");
        void* ps[6] = {b.a, b.b, b.sfa, b.sfb, b.c, b.d};
        for (int i = 0; i < 6; ++i) host_ptrs[i].push_back(ps[i]);
        sets[s].g.push_back(b);
      }
      for (int i = 0; i < 6; ++i) sets[s].ptrs[i] = upload(host_ptrs[i], "pointer array");
    }
    ck(cudaDeviceSynchronize(), "fill kernels");
  }

  // Reference for (set, group) into out (MxN row-major float); C contributes only when use_c.
  void reference(int s, int g, float beta, bool use_c, float* out) {
    const Problem& p = probs[g];
    const GroupBufs& b = sets[s].g[g];
    dim3 block(128), grid((p.n + 127) / 128, std::min(p.m, 65535));
    const cutlass::bfloat16_t* c = use_c ? b.c : nullptr;
    if constexpr (Cfg::BlockScaled) {
      Nvfp4Operands<LSFA, LSFB> ops{b.a, b.b, b.sfa, b.sfb, h_lsfa[g], h_lsfb[g], p.k};
      reference_kernel<<<grid, block>>>(ops, p.m, p.n, p.k, opt.alpha, beta, c, kDColMajor, out);
    } else {
      Fp8Operands ops{b.a, b.b, p.k};
      reference_kernel<<<grid, block>>>(ops, p.m, p.n, p.k, opt.alpha, beta, c, kDColMajor, out);
    }
    ck(cudaGetLastError(), "reference kernel launch");
    ck(cudaDeviceSynchronize(), "reference kernel");
  }

  template <class T>
  static T as(void** p) {  // a device array of pointers, as the typed pointer-to-pointer CUTLASS takes
    return static_cast<T>(static_cast<void*>(p));
  }

  typename Gemm::Arguments make_args(int s) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {int(probs.size()), d_shapes, h_shapes.data()};
    auto& ml = args.mainloop;
    void** const* P = sets[s].ptrs;
    ml.ptr_A = as<decltype(ml.ptr_A)>(P[0]);
    ml.dA = d_sa;
    ml.ptr_B = as<decltype(ml.ptr_B)>(P[1]);
    ml.dB = d_sb;
    if constexpr (Cfg::BlockScaled) {
      ml.ptr_SFA = as<decltype(ml.ptr_SFA)>(P[2]);
      ml.layout_SFA = d_lsfa;
      ml.ptr_SFB = as<decltype(ml.ptr_SFB)>(P[3]);
      ml.layout_SFB = d_lsfb;
    }
    auto& ep = args.epilogue;
    ep.thread.alpha = opt.alpha;
    ep.thread.beta = kHasC ? opt.beta : 0.0f;
    ep.ptr_C = kHasC ? as<decltype(ep.ptr_C)>(P[4]) : nullptr;
    ep.dC = d_sc;
    ep.ptr_D = as<decltype(ep.ptr_D)>(P[5]);
    ep.dD = d_sd;
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    return args;
  }

  // ---- the launch path: steps, correctness, timing ----
  std::vector<std::pair<std::string, std::string>> steps;
  void record(const char* name, const std::string& status, cudaError_t e) {
    steps.push_back({name, Json().add("status", jstr(status)).add("cuda", e == cudaSuccess ? "null" : jstr(cudaGetErrorString(e))).str()});
  }
  static std::string step_fail(const char* name, const std::string& status, cudaError_t e) {
    return std::string(name) + ": " + status + (e == cudaSuccess ? "" : std::string(" — ") + cudaGetErrorString(e));
  }

  // Runs every step; throws Failure on the first one that fails. Fills rel_err / nonfinite / us.
  void launch(double& rel_err, long long& nonfinite, bool& checked, std::vector<double>& us) {
    if constexpr (kLaunchable) launch_impl(rel_err, nonfinite, checked, us);  // else never instantiated
    else throw Failure{"this build cannot launch its kernel"};
  }

  void launch_impl(double& rel_err, long long& nonfinite, bool& checked, std::vector<double>& us) {
    int N = opt.rotate;
    gemms.resize(N);
    std::vector<typename Gemm::Arguments> args;
    for (int s = 0; s < N; ++s) args.push_back(make_args(s));

    cutlass::Status st = Gemm::can_implement(args[0]);
    cudaError_t ce = cudaGetLastError();
    record("can_implement", status_name(st), ce);
    if (st != cutlass::Status::kSuccess || ce != cudaSuccess) throw Failure{step_fail("can_implement", status_name(st), ce)};

    for (int s = 0; s < N; ++s) {
      size_t ws = Gemm::get_workspace_size(args[s]);
      sets[s].workspace = ws ? dalloc(ws, "workspace") : nullptr;
      st = gemms[s].initialize(args[s], sets[s].workspace);
      ce = cudaGetLastError();
      if (st != cutlass::Status::kSuccess) {
        // CUTLASS swallows the CUDA error behind a failed initialize: repeat its smem opt-in to capture it.
        size_t smem = sizeof(typename GemmKernel::SharedStorage);
        cudaError_t attr = cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        cudaGetLastError();
        int optin = 0;
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        cudaError_t shown = attr != cudaSuccess ? attr : ce;
        record("initialize", status_name(st), shown);
        std::string why = attr != cudaSuccess
            ? "cudaFuncSetAttribute(MaxDynamicSharedMemorySize=" + std::to_string(smem) + "): " + cudaGetErrorString(attr) +
                  "; opt-in limit " + std::to_string(optin)
            : std::string(ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA error");
        throw Failure{std::string("initialize: ") + status_name(st) + " — " + why};
      }
      if (ce != cudaSuccess) {
        record("initialize", status_name(st), ce);
        throw Failure{step_fail("initialize", status_name(st), ce)};
      }
    }
    record("initialize", status_name(st), cudaSuccess);

    // First launch on set 0, into a D poisoned with bf16 NaN so that unwritten elements show up.
    if (opt.check)
      for (int g = 0; g < int(probs.size()); ++g)
        ck(cudaMemset(sets[0].g[g].d, 0xFF, size_t(probs[g].m) * probs[g].n * 2), "cudaMemset(D poison)");
    st = gemms[0].run();
    ce = cudaGetLastError();
    if (st != cutlass::Status::kSuccess && ce == cudaSuccess) {
      // kernel_launch consumed the CUDA error; launch once more the same way to see it.
      auto const& params = gemms[0].params();
      cutlass::device_kernel<GemmKernel><<<Gemm::get_grid_shape(params), GemmKernel::get_block_shape(),
                                           GemmKernel::SharedStorageSize>>>(params);
      ce = cudaGetLastError();
    }
    record("run", status_name(st), ce);
    if (st != cutlass::Status::kSuccess || ce != cudaSuccess) throw Failure{step_fail("run", status_name(st), ce)};
    ce = cudaDeviceSynchronize();
    record("sync", ce == cudaSuccess ? "kSuccess" : cudaGetErrorName(ce), ce);
    if (ce != cudaSuccess) throw Failure{step_fail("sync", cudaGetErrorName(ce), ce)};

    if (opt.check) {
      check(rel_err, nonfinite);
      checked = true;
    }
    time(us);
  }

  void check(double& rel_err, long long& nonfinite) {
    size_t max_mn = 0;
    for (const Problem& p : probs) max_mn = std::max(max_mn, size_t(p.m) * p.n);
    float* d_ref = static_cast<float*>(dalloc(max_mn * sizeof(float), "reference"));
    std::vector<float> ref(max_mn);
    std::vector<cutlass::bfloat16_t> d(max_mn);
    double num = 0, den = 0;
    nonfinite = 0;
    for (int g = 0; g < int(probs.size()); ++g) {
      const Problem& p = probs[g];
      size_t mn = size_t(p.m) * p.n;
      reference(0, g, kHasC ? opt.beta : 0.0f, kHasC, d_ref);
      ck(cudaMemcpy(ref.data(), d_ref, mn * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy(reference)");
      ck(cudaMemcpy(d.data(), sets[0].g[g].d, mn * 2, cudaMemcpyDeviceToHost), "cudaMemcpy(D)");
      for (int m = 0; m < p.m; ++m)
        for (int n = 0; n < p.n; ++n) {
          double r = ref[size_t(m) * p.n + n];
          double v = float(d[kDColMajor ? size_t(n) * p.m + m : size_t(m) * p.n + n]);
          if (!std::isfinite(v)) { ++nonfinite; continue; }
          num += (v - r) * (v - r);
          den += r * r;
        }
    }
    rel_err = nonfinite > 0 ? 1e30 : (den > 0 ? std::sqrt(num / den) : (num > 0 ? 1e30 : 0.0));
  }

  void time(std::vector<double>& us) {
    int N = opt.rotate;
    long long launches = 0;
    auto launch_one = [&]() {
      cutlass::Status st = gemms[launches++ % N].run();
      if (st != cutlass::Status::kSuccess) throw Failure{step_fail("timing: run", status_name(st), cudaGetLastError())};
    };
    for (int w = 0; w < opt.warmup; ++w) launch_one();
    ck(cudaDeviceSynchronize(), "timing: warmup sync");
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "cudaEventCreate");
    ck(cudaEventCreate(&e1), "cudaEventCreate");
    int iters = opt.iters;
    if (opt.target_ms > 0) {  // size each repeat to about target_ms of GPU time, between 3 and --iters launches
      ck(cudaEventRecord(e0), "cudaEventRecord");
      for (int i = 0; i < 3; ++i) launch_one();
      ck(cudaEventRecord(e1), "cudaEventRecord");
      ck(cudaEventSynchronize(e1), "timing: estimate sync");
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      double per = std::max(1e-3, double(ms) / 3.0);
      iters = int(std::clamp(std::ceil(opt.target_ms / per), 3.0, double(std::max(3, opt.iters))));
    }
    for (int r = 0; r < opt.repeats; ++r) {
      ck(cudaEventRecord(e0), "cudaEventRecord");
      for (int i = 0; i < iters; ++i) launch_one();
      ck(cudaEventRecord(e1), "cudaEventRecord");
      ck(cudaEventSynchronize(e1), "timing: sync");
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      us.push_back(double(ms) * 1000.0 / iters);
    }
    ck(cudaGetLastError(), "timing");
    ck(cudaDeviceSynchronize(), "timing: final sync");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }

  // --reference-dump: group 0 of set 0, raw operand bytes and the fp32 reference (beta = 0, no C).
  std::string dump(const std::string& dir) {
    if constexpr (!Cfg::BlockScaled) {
      throw Failure{"--reference-dump is only for block-scaled (nvfp4) builds"};
    } else {
      allocate(1);
      const Problem& p = probs[0];
      const GroupBufs& b = sets[0].g[0];
      size_t mn = size_t(p.m) * p.n;
      float* d_ref = static_cast<float*>(dalloc(mn * sizeof(float), "reference"));
      reference(0, 0, 0.0f, false, d_ref);
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw Failure{"mkdir(" + dir + "): " + std::strerror(errno)};
      auto write = [&](const char* name, const void* dev, size_t bytes) {
        std::vector<char> host(bytes);
        ck(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost), std::string("cudaMemcpy(") + name + ")");
        std::ofstream f(dir + "/" + name, std::ios::binary);
        f.write(host.data(), std::streamsize(bytes));
        if (!f) throw Failure{std::string("cannot write ") + dir + "/" + name};
      };
      write("A.bin", b.a, b.a_bytes);
      write("B.bin", b.b, b.b_bytes);
      write("SFA.bin", b.sfa, b.sfa_bytes);
      write("SFB.bin", b.sfb, b.sfb_bytes);
      write("D_ref.bin", d_ref, mn * sizeof(float));
      Json meta;
      meta.add("M", std::to_string(p.m)).add("N", std::to_string(p.n)).add("K", std::to_string(p.k));
      meta.add("alpha", jnum(opt.alpha)).add("sfa_bytes", std::to_string(b.sfa_bytes)).add("sfb_bytes", std::to_string(b.sfb_bytes));
      std::ofstream f(dir + "/meta.json");
      f << meta.str() << "\n";
      if (!f) throw Failure{"cannot write " + dir + "/meta.json"};
      return meta.body;
    }
  }
};

int main(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  std::vector<PointSpec> points = read_points(opt.problems, opt.rotate);

  // 1. The device.
  cudaDeviceProp prop{};
  int cc = -1, optin = 0, sms = 0;
  cudaError_t dev_err = cudaSetDevice(opt.device);
  if (dev_err == cudaSuccess) dev_err = cudaGetDeviceProperties(&prop, opt.device);
  if (dev_err == cudaSuccess) dev_err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, opt.device);
  if (dev_err == cudaSuccess) {
    cc = prop.major * 10 + prop.minor;
    sms = prop.multiProcessorCount;
  }
  auto header = [&](Json& j) {
    j.add("arch_built", std::to_string(TP_ARCH)).add("index", std::to_string(kCfgIndex));
    j.add("device_cc", cc >= 0 ? std::to_string(cc) : "null");
    j.add("device_name", dev_err == cudaSuccess ? jstr(prop.name) : "null");
    j.add("smem_optin", std::to_string(optin)).add("sm_count", std::to_string(sms));
  };

  // 7. Reference dump mode: no CUTLASS launch, any arch; first point only.
  if (!opt.dump_dir.empty()) {
    if (!K::BlockScaled) usage("--reference-dump needs an nvfp4 (block-scaled) build");
    Harness<K> h(opt, points[0].probs, opt.device, sms);
    Json j;
    header(j);
    j.add("reference_dump", jstr(opt.dump_dir));
    std::string error;
    try {
      if (dev_err != cudaSuccess) throw Failure{std::string("device ") + std::to_string(opt.device) + ": " + cudaGetErrorString(dev_err)};
      std::string meta = h.dump(opt.dump_dir);
      j.body += ", " + meta;
    } catch (const Failure& f) {
      error = f.reason;
    }
    j.add("error", error.empty() ? "null" : jstr(error));
    std::printf("%s\n", j.str().c_str());
    return 0;
  }

  char buf[256];
  for (size_t pi = 0; pi < points.size(); ++pi) {
    Options popt = opt;
    popt.rotate = points[pi].rotate;
    Harness<K> h(popt, points[pi].probs, opt.device, sms);
    Json j;
    header(j);
    j.add("point", std::to_string(pi));
    j.add("smem_bytes", std::to_string(sizeof(typename K::GemmKernel::SharedStorage)));
    j.add("stages", std::to_string(int(K::CollectiveMainloop::DispatchPolicy::Stages)));
    j.add("groups", std::to_string(points[pi].probs.size()));

    std::string status = "ok", reason;
    double rel_err = 0;
    long long nonfinite = 0;
    bool checked = false, sticky = false;
    std::vector<double> us;
    if (dev_err != cudaSuccess) {
      status = "not-runnable-here";
      reason = "no usable CUDA device " + std::to_string(opt.device) + ": " + cudaGetErrorString(dev_err);
    } else if (cc != TP_ARCH) {
      status = "not-runnable-here";
      std::snprintf(buf, sizeof(buf), "built for sm_%da, device is sm_%d (%s)", TP_ARCH, cc, prop.name);
      reason = buf;
    } else if (!Harness<K>::kLaunchable) {
      status = "not-runnable-here";
      std::snprintf(buf, sizeof(buf), "this family's kernel cannot run from an sm_%da build (an nvfp4 sm_90a build only "
                    "serves --reference-dump)", TP_ARCH);
      reason = buf;
    } else {
      try {
        h.allocate(popt.rotate);
        h.launch(rel_err, nonfinite, checked, us);
      } catch (const Failure& f) {
        status = "launch-error";
        reason = f.reason;
        std::fprintf(stderr, "launch-error: %s\n", reason.c_str());
      }
      // A sticky error (illegal address, ...) poisons the context: report this point and stop; the caller starts
      // a fresh process for the points that remain.
      sticky = cudaDeviceSynchronize() != cudaSuccess;
      free_point_allocs();
    }

    std::string steps;
    for (auto& [name, obj] : h.steps) steps += (steps.empty() ? "" : ", ") + jstr(name) + ": " + obj;
    j.add("steps", "{" + steps + "}");
    j.add("launch_status", jstr(status)).add("launch_reason", reason.empty() ? "null" : jstr(reason));
    j.add("rel_err", checked ? jnum(rel_err) : "null").add("nonfinite", checked ? std::to_string(nonfinite) : "null");
    std::string list;
    for (double u : us) list += (list.empty() ? "" : ", ") + jnum(u);
    j.add("us", "[" + list + "]").add("rotate", std::to_string(popt.rotate));
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
    if (sticky) return 3;
  }
  return 0;
}
