// tileprobe runtime harness: the harness for one kernel config (Cfg, a type from kernels.cuh): device buffers and
// rotation sets, CUTLASS arguments, the step-by-step launch, the element-wise check and the timing (plain launches
// and a CUDA-graph replay). Included by run.cu after the config is defined; TP_ARCH must be defined.
#pragma once

#include <cuda_runtime.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cutlass/util/packed_stride.hpp"
#include "kernels.cuh"
#include "harness_io.cuh"
#include "reference.cuh"
#include "faults.cuh"
#include "kernel_library.cuh"

// The GEMM kernel, loaded from the kernel.cubin built beside the harness (kernel_library.cuh), once per process.
inline KernelLibrary g_kernel;
const char* tp_config_id();  // the config's name (its TP_CFG_ID line in tp_configs.inc), defined in run.cu
int tp_config_index();       // its index in this harness (--config-index), defined in run.cu

// ---- Device memory of one point ----
inline std::vector<void*> g_allocs;  // everything one point allocated, freed before the next point

inline void* dalloc(size_t bytes, const std::string& what) {
  void* p = nullptr;
  ck(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc(" + what + ", " + std::to_string(bytes) + " bytes)");
  g_allocs.push_back(p);
  return p;
}

inline void free_point_allocs() {
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
struct SfTypes { using LA = int; using LB = int; using SF = void; };
template <class C>
struct SfTypes<C, true> {
  using LA = typename C::LayoutSFA;
  using LB = typename C::LayoutSFB;
  using SF = typename C::ElementSF;
};

// Everything a point measures, for its result line.
struct Result {
  bool checked = false;
  double rel_err = 0, worst_value = 0, worst_ref = 0, worst_ratio = 0;
  long long nonfinite = 0, checked_elements = 0, bad_elements = 0, bad_groups = 0;
  long long worst_group = 0, worst_row = 0, worst_col = 0;
  long long worst_token = -1;  // finalize (scatter) builds only: the worst element's token row; -1: null
  int iters = 0;  // launches per timed repeat (plain and graph)
  std::vector<double> us, us_graph;
  std::string graph_error;  // empty: null
  // Host wall milliseconds of the point's phases (each ends on a device sync): allocate + fill, CUTLASS's steps up to
  // the first run's sync, the check (reference + compare), the timing; -1 where the point did not get there.
  double ms_allocate = -1, ms_first_run = -1, ms_check = -1, ms_time = -1;
};

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---- What a family may change about a launch ----
// FamilyRun<Cfg> is the one place a family's launch differs from the generic path: the epilogue and scheduler
// arguments, per-group alpha, the buffers its epilogue owns, and (for an epilogue that writes no per-group D, such
// as FlashInfer's finalize scatter) its own output preparation, corruption and check. A family specializes it in a
// header that run.cu includes for that family only (families/flashinfer_moe_run.cuh); this generic version is what
// every other family uses: alpha/beta scalars from the options, an optional bf16 C, one MxN D per group.
template <class Cfg, class Enable = void>
struct FamilyRun {
  static constexpr bool kGroupD = true;       // one MxN D per group, poisoned, checked by Harness::check_groups
  static constexpr bool kHostShapes = true;   // hand CUTLASS the host copy of the problem shapes
  static constexpr bool kFinalize = false;    // result fields tokens/topk/worst_token are null
  long long tokens = 0;
  int topk = 0;
  template <class H> void prepare(H& h) { h.h_alpha.assign(h.probs.size(), h.opt.alpha); }
  template <class H> size_t extra_set_bytes(const H&) const { return 0; }
  template <class H> void allocate(H&, int) {}
  template <class H, class Args> void epilogue(H& h, int s, Args& args) {
    auto& ep = args.epilogue;
    void** const* P = h.sets[s].ptrs;
    ep.thread.alpha = h.opt.alpha;
    ep.thread.beta = H::kHasC ? h.opt.beta : 0.0f;
    ep.ptr_C = H::kHasC ? H::template as<decltype(ep.ptr_C)>(P[4]) : nullptr;
    ep.dC = h.d_sc;
    ep.ptr_D = H::template as<decltype(ep.ptr_D)>(P[5]);
    ep.dD = h.d_sd;
  }
  template <class H> void before_first_run(H& h) { h.poison_group_d(); }
  template <class H> void corrupt(H& h, int g) { h.corrupt_group_d(g); }
  template <class H> void check(H& h, Result& r) { h.check_groups(r); }
  template <class H> void dump(H&, const std::string&, Json&) {}
};

// ---- The harness for one kernel config ----
template <class Cfg>
struct Harness {
  using Gemm = typename Cfg::Gemm;
  using GemmKernel = typename Cfg::GemmKernel;
  using LSFA = typename SfTypes<Cfg>::LA;
  using LSFB = typename SfTypes<Cfg>::LB;
  using ElementSF = typename SfTypes<Cfg>::SF;
  // The reference's reader of one group's operands (each operand decoded as its own element type, times its scale).
  using Ops = Operands<typename Cfg::DataA, typename Cfg::DataB, ElementSF, LSFA, LSFB>;
  using Fam = FamilyRun<Cfg>;
  // The kernel's own problem shape: int extents for tileprobe's families, int64 for flashinfer-moe.
  using Shape3 = typename GemmKernel::ProblemShape::UnderlyingProblemShape;
  using Extent = std::remove_cv_t<std::remove_reference_t<decltype(cute::get<0>(Shape3{}))>>;
  static constexpr bool kHasC = !std::is_void_v<typename Cfg::ElementC>;
  static constexpr bool kDColMajor = std::is_same_v<typename Cfg::LayoutD, cutlass::layout::ColumnMajor>;
  static constexpr bool kLaunchable = tileprobe::kLaunchableOn<Cfg>;
  static constexpr int kBitsA = cutlass::sizeof_bits<typename Cfg::DataA>::value;
  static constexpr int kBitsB = cutlass::sizeof_bits<typename Cfg::DataB>::value;

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
  const Fault& fault;
  long long point_id;
  int device, sm_count;
  std::vector<Problem> probs;
  std::vector<float> h_alpha;  // per-group alpha (FamilyRun::prepare; the generic one: --alpha for every group)
  Fam fam;
  std::vector<Shape3> h_shapes;
  std::vector<LSFA> h_lsfa;
  std::vector<LSFB> h_lsfb;
  std::vector<GroupBufs> sizes;  // per-group byte counts (pointers null), from prepare()
  size_t set_bytes = 0;          // A, B, SFA, SFB, C, D over all groups: one rotation set
  int sets_allocated = 0;
  Shape3* d_shapes = nullptr;
  typename GemmKernel::InternalStrideA* d_sa = nullptr;
  typename GemmKernel::InternalStrideB* d_sb = nullptr;
  typename GemmKernel::InternalStrideC* d_sc = nullptr;
  typename GemmKernel::InternalStrideD* d_sd = nullptr;
  LSFA* d_lsfa = nullptr;
  LSFB* d_lsfb = nullptr;
  std::vector<Set> sets;
  std::vector<Gemm> gemms;
  cudaStream_t stream = nullptr;  // every GEMM launch (plain, first, captured) goes to this one stream
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;

  Harness(const Options& o, const Fault& f, long long id, std::vector<Problem> p, int dev, int sms)
      : opt(o), fault(f), point_id(id), device(dev), sm_count(sms), probs(std::move(p)) {
    prepare();
  }

  void release() {  // errors ignored: after a sticky error these fail too, and the process is about to exit
    if (ev0) cudaEventDestroy(ev0);
    if (ev1) cudaEventDestroy(ev1);
    if (stream) cudaStreamDestroy(stream);
    ev0 = ev1 = nullptr;
    stream = nullptr;
    cudaGetLastError();
  }

  static void fill(void* p, size_t n, uint64_t seed, int kind) {
    if (n == 0) return;
    int blocks = int(std::min<size_t>((n + 255) / 256, 4096));
    fill_kernel<<<blocks, 256>>>(p, n, seed, kind);
    ck(cudaGetLastError(), "fill_kernel launch");
  }

  // Host only: shapes, SF layouts and the byte counts of one set (so set_bytes exists even where nothing runs).
  void prepare() {
    for (const Problem& p : probs) {
      h_shapes.push_back(cute::make_shape(Extent(p.m), Extent(p.n), Extent(p.k)));
      GroupBufs b;
      b.a_bytes = (size_t(p.m) * p.k * kBitsA + 7) / 8;
      b.b_bytes = (size_t(p.n) * p.k * kBitsB + 7) / 8;
      if constexpr (Cfg::BlockScaled) {
        using SfCfg = typename Cfg::Sm1xxBlkScaledConfig;
        h_lsfa.push_back(SfCfg::tile_atom_to_shape_SFA(cute::make_shape(p.m, p.n, p.k, 1)));
        h_lsfb.push_back(SfCfg::tile_atom_to_shape_SFB(cute::make_shape(p.m, p.n, p.k, 1)));
        b.sfa_bytes = size_t(cute::size(cute::filter_zeros(h_lsfa.back()))) * sizeof(typename Cfg::ElementSF);
        b.sfb_bytes = size_t(cute::size(cute::filter_zeros(h_lsfb.back()))) * sizeof(typename Cfg::ElementSF);
      }
      size_t mn = size_t(p.m) * p.n;
      set_bytes += b.a_bytes + b.b_bytes + b.sfa_bytes + b.sfb_bytes + (kHasC ? mn * 2 : 0) + (Fam::kGroupD ? mn * 2 : 0);
      sizes.push_back(b);
    }
    fam.prepare(*this);
    set_bytes += fam.extra_set_bytes(*this);
  }

  // Strides and SF layouts on the device (shared by all sets), then nsets sets of operand buffers filled on
  // device. Any failed cudaMalloc fails the point: the set count is never quietly reduced.
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
      sa.push_back(cutlass::make_cute_packed_stride(SA{}, cute::make_shape(p.m, p.k, 1)));
      sb.push_back(cutlass::make_cute_packed_stride(SB{}, cute::make_shape(p.n, p.k, 1)));
      sc.push_back(cutlass::make_cute_packed_stride(SC{}, cute::make_shape(p.m, p.n, 1)));
      sd.push_back(cutlass::make_cute_packed_stride(SD{}, cute::make_shape(p.m, p.n, 1)));
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
    // One allocation per set, carved into 256-byte-aligned buffers: R sets cost R cudaMallocs, not R x G x 6.
    auto padded = [](size_t bytes) { return (bytes + 255) & ~size_t(255); };
    size_t arena = 0;
    for (int g = 0; g < G; ++g) {
      const GroupBufs& b = sizes[g];
      size_t mn = size_t(probs[g].m) * probs[g].n;
      arena += padded(b.a_bytes) + padded(b.b_bytes) + padded(b.sfa_bytes) + padded(b.sfb_bytes) +
               (int(kHasC) + int(Fam::kGroupD)) * padded(mn * 2);
    }
    sets.resize(nsets);
    for (int s = 0; s < nsets; ++s) {
      std::vector<void*> host_ptrs[6];
      char* next = static_cast<char*>(dalloc(arena, "set " + std::to_string(s) + " of " + std::to_string(nsets)));
      auto carve = [&](size_t bytes) {
        void* p = next;
        next += padded(bytes);
        return p;
      };
      for (int g = 0; g < G; ++g) {
        const Problem& p = probs[g];
        uint64_t seed = mix64((opt.seed + uint64_t(s)) * 0x100000001B3ull + uint64_t(g) * 16);
        GroupBufs b = sizes[g];
        b.a = static_cast<uint8_t*>(carve(b.a_bytes));
        b.b = static_cast<uint8_t*>(carve(b.b_bytes));
        fill(b.a, b.a_bytes, seed + 1, Elem<typename Cfg::DataA>::kFill);
        fill(b.b, b.b_bytes, seed + 2, Elem<typename Cfg::DataB>::kFill);
        if constexpr (Cfg::BlockScaled) {
          b.sfa = static_cast<uint8_t*>(carve(b.sfa_bytes));
          b.sfb = static_cast<uint8_t*>(carve(b.sfb_bytes));
          fill(b.sfa, b.sfa_bytes, seed + 3, Scale<ElementSF>::kFill);
          fill(b.sfb, b.sfb_bytes, seed + 4, Scale<ElementSF>::kFill);
        }
        size_t mn = size_t(p.m) * p.n;
        if (kHasC) {
          b.c = static_cast<cutlass::bfloat16_t*>(carve(mn * 2));
          fill(b.c, mn, seed + 5, kBf16);
        }
        if constexpr (Fam::kGroupD) {
          b.d = static_cast<cutlass::bfloat16_t*>(carve(mn * 2));
          ck(cudaMemset(b.d, 0, mn * 2), "cudaMemset(D)");
        }
        void* ps[6] = {b.a, b.b, b.sfa, b.sfb, b.c, b.d};
        for (int i = 0; i < 6; ++i) host_ptrs[i].push_back(ps[i]);
        sets[s].g.push_back(b);
      }
      for (int i = 0; i < 6; ++i) sets[s].ptrs[i] = upload(host_ptrs[i], "pointer array");
      sets_allocated = s + 1;
    }
    fam.allocate(*this, nsets);
    ck(cudaDeviceSynchronize(), "fill kernels");
  }

  // The reference's view of (set, group): its operand bytes, scale factors and SF layouts.
  Ops operands(int s, int g) const {
    const GroupBufs& b = sets[s].g[g];
    if constexpr (Cfg::BlockScaled) return Ops{b.a, b.b, b.sfa, b.sfb, h_lsfa[g], h_lsfb[g], probs[g].k};
    else return Ops{b.a, b.b, nullptr, nullptr, 0, 0, probs[g].k};
  }

  // Reference for (set, group) into out (MxN row-major float) on the default stream; C contributes only when use_c.
  void reference(int s, int g, float beta, bool use_c, float* out, bool sync = true) {
    const Problem& p = probs[g];
    const GroupBufs& b = sets[s].g[g];
    constexpr int warps = kRefThreads / 32;  // one warp per output column, kRefRows rows per pass
    dim3 block(kRefThreads), grid((p.n + warps - 1) / warps, std::max(1, std::min((p.m + kRefRows - 1) / kRefRows, 65535)));
    const cutlass::bfloat16_t* c = use_c ? b.c : nullptr;
    reference_kernel<<<grid, block>>>(operands(s, g), p.m, p.n, p.k, h_alpha[g], beta, c, kDColMajor, out);
    ck(cudaGetLastError(), "reference kernel launch");
    if (sync) ck(cudaDeviceSynchronize(), "reference kernel");
  }

  template <class T>
  static T as(void** p) {  // a device array of pointers, as the typed pointer-to-pointer CUTLASS takes
    return static_cast<T>(static_cast<void*>(p));
  }

  typename Gemm::Arguments make_args(int s) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {int(probs.size()), d_shapes, Fam::kHostShapes ? h_shapes.data() : nullptr};
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
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    fam.epilogue(*this, s, args);  // epilogue (and, for some families, scheduler) arguments
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

  // The whole point: fault injection, allocation, every step; throws Failure on the first one that fails.
  void launch(Result& r) {
    if constexpr (kLaunchable) {  // else never instantiated
      inject_launch_fault(fault, point_id);
      auto t0 = std::chrono::steady_clock::now();
      allocate(opt.rotate);
      r.ms_allocate = ms_since(t0);
      launch_impl(r);
    } else {
      throw Failure{"this build cannot launch its kernel"};
    }
  }

  void launch_impl(Result& r) {
    int N = opt.rotate;
    auto t0 = std::chrono::steady_clock::now();
    ck(cudaStreamCreate(&stream), "cudaStreamCreate");
    ck(cudaEventCreate(&ev0), "cudaEventCreate");
    ck(cudaEventCreate(&ev1), "cudaEventCreate");
    gemms.resize(N);
    std::vector<typename Gemm::Arguments> args;
    for (int s = 0; s < N; ++s) args.push_back(make_args(s));

    cutlass::Status st = Gemm::can_implement(args[0]);
    cudaError_t ce = cudaGetLastError();
    record("can_implement", status_name(st), ce);
    if (st != cutlass::Status::kSuccess || ce != cudaSuccess) throw Failure{step_fail("can_implement", status_name(st), ce)};

    // Part of initialize: CUTLASS's initialize would have the kernel linked in.
    std::string unloaded = g_kernel.load(tp_config_id(), tp_config_index());
    if (!unloaded.empty()) {
      record("initialize", "kErrorInternal", cudaGetLastError());
      throw Failure{"initialize: kErrorInternal — the GEMM kernel did not load: " + unloaded};
    }
    for (int s = 0; s < N; ++s) {
      size_t ws = Gemm::get_workspace_size(args[s]);
      sets[s].workspace = ws ? dalloc(ws, "workspace, set " + std::to_string(s)) : nullptr;
      st = gemms[s].initialize(args[s], sets[s].workspace, stream, &g_kernel);
      if (st == cutlass::Status::kSuccess) st = g_kernel.opt_in_smem(GemmKernel::SharedStorageSize);
      ce = cudaGetLastError();
      if (st != cutlass::Status::kSuccess) {
        // CUTLASS swallows the CUDA error behind a failed initialize: repeat its smem opt-in to capture it.
        size_t smem = sizeof(typename GemmKernel::SharedStorage);
        cudaError_t attr = cudaFuncSetAttribute(g_kernel.fn(),
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

    // First launch on set 0, into a D poisoned with bf16 NaN so that unwritten elements show up (the family may
    // prepare its output otherwise: a scatter that accumulates needs zeros).
    fam.before_first_run(*this);
    ck(cudaDeviceSynchronize(), "D poison: sync");
    st = gemms[0].run(stream, &g_kernel);
    ce = cudaGetLastError();
    if (st != cutlass::Status::kSuccess && ce == cudaSuccess) {
      // The launcher consumed the CUDA error; launch once more, plainly, to see it.
      auto params = gemms[0].params();
      void* kernel_args[] = {&params};
      ce = cudaLaunchKernel(g_kernel.fn(), Gemm::get_grid_shape(params), GemmKernel::get_block_shape(), kernel_args,
                            GemmKernel::SharedStorageSize, stream);
      cudaGetLastError();
    }
    record("run", status_name(st), ce);
    if (st != cutlass::Status::kSuccess || ce != cudaSuccess) throw Failure{step_fail("run", status_name(st), ce)};
    ce = cudaDeviceSynchronize();
    record("sync", ce == cudaSuccess ? "kSuccess" : cudaGetErrorName(ce), ce);
    if (ce != cudaSuccess) throw Failure{step_fail("sync", cudaGetErrorName(ce), ce)};

    r.ms_first_run = ms_since(t0);
    if (fault.at(Fault::kCorrupt, point_id)) fam.corrupt(*this, int(fault.group));
    t0 = std::chrono::steady_clock::now();
    if (opt.check) {
      fam.check(*this, r);
      r.checked = true;
    }
    r.ms_check = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    time(r);
    r.ms_time = ms_since(t0);
  }

  void poison_group_d() {
    if (opt.check)
      for (int g = 0; g < int(probs.size()); ++g)
        ck(cudaMemset(sets[0].g[g].d, 0xFF, size_t(probs[g].m) * probs[g].n * 2), "cudaMemset(D poison)");
  }

  // TILEPROBE_FAULT corrupt: damage one block of set 0's D of this group, after the run and before the check.
  void corrupt_group_d(int g) {
    if (g >= int(probs.size()))
      throw Failure{"TILEPROBE_FAULT corrupt: group " + std::to_string(g) + " out of range (the point has " +
                    std::to_string(probs.size()) + " groups)"};
    std::fprintf(stderr, "TILEPROBE_FAULT corrupt: point %lld group %d, a %dx%d block of D at (0, 0)\n", point_id, g,
                 kCorruptRows, kCorruptCols);
    corrupt_kernel<<<32, 256>>>(sets[0].g[g].d, probs[g].m, probs[g].n, kDColMajor);
    ck(cudaGetLastError(), "corrupt_kernel launch");
    ck(cudaDeviceSynchronize(), "corrupt_kernel");
  }

  // Every element of every group of set 0 against the reference; see reference.cuh for the rule. The groups' references
  // are computed side by side (reference_groups_kernel), a run of consecutive groups at a time whose outputs fit in
  // kRefBudgetBytes (at least one group), then each group of the run is compared.
  size_t total_mn() const {
    size_t t = 0;
    for (const Problem& p : probs) t += size_t(p.m) * p.n;
    return t;
  }
  static constexpr size_t kRefBudgetBytes = size_t(256) << 20;
  void check_groups(Result& r) {
    int G = int(probs.size());
    size_t max_mn = 0;
    for (const Problem& p : probs) max_mn = std::max(max_mn, size_t(p.m) * p.n);
    if (max_mn >= 0xFFFFFFFFull) throw Failure{"check: a group's M*N reaches 2^32 elements; the check indexes with 32 bits"};
    size_t budget = std::max(max_mn, kRefBudgetBytes / sizeof(float));
    float* d_ref = static_cast<float*>(dalloc(std::min(budget, total_mn()) * sizeof(float), "reference"));
    GroupStats* d_st = static_cast<GroupStats*>(dalloc(G * sizeof(GroupStats), "compare stats"));
    ck(cudaMemset(d_st, 0, G * sizeof(GroupStats)), "cudaMemset(compare stats)");
    auto* d_groups = static_cast<RefGroup<Ops>*>(dalloc(G * sizeof(RefGroup<Ops>), "reference groups"));
    std::vector<RefGroup<Ops>> hg(G);
    for (int g0 = 0; g0 < G;) {  // all on the default stream, in order: d_ref is reused run after run
      int g1 = g0, max_m = 0, max_n = 0;
      size_t used = 0;
      while (g1 < G && (g1 == g0 || used + size_t(probs[g1].m) * probs[g1].n <= budget) && g1 - g0 < 65535) {
        const Problem& p = probs[g1];
        hg[g1] = RefGroup<Ops>{operands(0, g1), p.m, p.n, p.k, h_alpha[g1], kHasC ? opt.beta : 0.0f,
                               kHasC ? sets[0].g[g1].c : nullptr, used};
        used += size_t(p.m) * p.n;
        max_m = std::max(max_m, p.m), max_n = std::max(max_n, p.n);
        ++g1;
      }
      ck(cudaMemcpy(d_groups + g0, hg.data() + g0, (g1 - g0) * sizeof(RefGroup<Ops>), cudaMemcpyHostToDevice),
         "cudaMemcpy(reference groups)");
      constexpr int cols = kRefThreads / 32 * kRefCols;
      dim3 grid((max_n + cols - 1) / cols, std::max(1, std::min((max_m + kRefRows - 1) / kRefRows, 65535)), g1 - g0);
      reference_groups_kernel<<<grid, kRefThreads>>>(d_groups + g0, kDColMajor, d_ref);
      ck(cudaGetLastError(), "reference kernel launch");
      for (int g = g0; g < g1; ++g) {
        const Problem& p = probs[g];
        size_t mn = size_t(p.m) * p.n;
        float* ref = d_ref + hg[g].out_offset;
        int blocks = int(std::min<size_t>((mn + kCompareThreads - 1) / kCompareThreads, 2048));
        ref_sq_kernel<<<blocks, kCompareThreads>>>(ref, mn, d_st + g);
        compare_kernel<<<blocks, kCompareThreads>>>(sets[0].g[g].d, ref, p.m, p.n, kDColMajor, opt.atol, opt.rtol, d_st + g);
        worst_values_kernel<<<1, 1>>>(sets[0].g[g].d, ref, p.m, p.n, kDColMajor, d_st + g);
        ck(cudaGetLastError(), "compare kernel launch");
      }
      g0 = g1;
    }
    ck(cudaDeviceSynchronize(), "reference and compare kernels");
    std::vector<GroupStats> st(G);
    ck(cudaMemcpy(st.data(), d_st, G * sizeof(GroupStats), cudaMemcpyDeviceToHost), "cudaMemcpy(compare stats)");
    fold_stats(st, r, [](int) { return true; }, [&](int g, size_t i) {
      r.worst_row = (long long)(i / size_t(probs[g].n));
      r.worst_col = (long long)(i % size_t(probs[g].n));
    });
  }

  // The per-group compare stats into the point's result (every check uses this one reduction): counts summed over
  // the groups `used(g)` admits, the worst element the one with the largest ratio (ties: the first group), placed by
  // `where(g, i)` from its row-major index i in that group's compared block.
  template <class Used, class Where>
  static void fold_stats(const std::vector<GroupStats>& st, Result& r, Used used, Where where) {
    double num = 0, den = 0;
    unsigned long long best = 0;
    bool any = false;
    for (int g = 0; g < int(st.size()); ++g) {
      if (!used(g)) continue;
      const GroupStats& s = st[g];
      r.checked_elements += (long long)s.checked;
      r.bad_elements += (long long)s.bad;
      r.nonfinite += (long long)s.nonfinite;
      r.bad_groups += s.bad ? 1 : 0;
      num += s.num;
      den += s.den;
      if (!any || (s.worst_key >> 32) > (best >> 32)) {  // ratio only: ties keep the first group
        any = true;
        best = s.worst_key;
        r.worst_group = g;
        where(g, worst_index(s.worst_key));
        r.worst_value = s.worst_value;
        r.worst_ref = s.worst_ref;
      }
    }
    uint32_t bits = uint32_t(best >> 32);
    float ratio;
    std::memcpy(&ratio, &bits, sizeof(ratio));
    r.worst_ratio = std::isfinite(ratio) ? double(ratio) : 1e30;
    r.rel_err = r.nonfinite > 0 ? 1e30 : (den > 0 ? std::sqrt(num / den) : (num > 0 ? 1e30 : 0.0));
  }

  double elapsed_ms() {
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, ev0, ev1), "cudaEventElapsedTime");
    return double(ms);
  }

  // The stopping rule for timed repeats. With the samples sorted, one more sample, whatever its value, moves the
  // median by at most half the larger gap beside it (odd count) or half the middle gap (even count). Repeats go on
  // until there are --repeats of them, then one at a time until that bound is <= --median-tol x the median (more
  // repeats could not move it further), or --max-repeats are done.
  static double median_move_bound(std::vector<double> v, double& median) {
    std::sort(v.begin(), v.end());
    size_t n = v.size(), m = n / 2;
    median = n % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
    return n % 2 ? 0.5 * std::max(v[m] - v[m - 1], v[m + 1] - v[m]) : 0.5 * (v[m] - v[m - 1]);
  }
  bool another_repeat(const std::vector<double>& v) const {
    int n = int(v.size());
    if (n < opt.repeats) return true;
    if (n >= std::max(opt.repeats, opt.max_repeats)) return false;
    if (n < 3) return true;  // the bound needs a neighbour on each side of the median
    double median = 0;
    double move = median_move_bound(v, median);
    return move > opt.median_tol * median;
  }

  // Plain launches, then the same launches replayed from a CUDA graph; both per-launch microseconds per repeat.
  void time(Result& r) {
    int N = opt.rotate;
    long long launches = 0;
    auto launch_one = [&]() {
      cutlass::Status st = gemms[launches++ % N].run(stream, &g_kernel);
      if (st != cutlass::Status::kSuccess) throw Failure{step_fail("timing: run", status_name(st), cudaGetLastError())};
    };
    int iters = opt.iters, warmup = opt.warmup;
    if (opt.target_ms > 0) {  // size each repeat to about target_ms of GPU time, between 1 and --iters launches
      ck(cudaEventRecord(ev0, stream), "cudaEventRecord");
      for (int i = 0; i < 3; ++i) launch_one();
      ck(cudaEventRecord(ev1, stream), "cudaEventRecord");
      ck(cudaEventSynchronize(ev1), "timing: estimate sync");
      double per = std::max(1e-3, elapsed_ms() / 3.0);
      double fill = std::ceil(opt.target_ms / per);
      iters = int(std::clamp(fill, 1.0, double(std::max(1, opt.iters))));
      // The 3 estimate launches warm up too; the rest of the warm-up stops at about target_ms of GPU time.
      warmup = int(std::clamp(fill - 3.0, 0.0, double(opt.warmup)));
    }
    for (int w = 0; w < warmup; ++w) launch_one();
    ck(cudaStreamSynchronize(stream), "timing: warmup sync");
    r.iters = iters;
    while (another_repeat(r.us)) {
      ck(cudaEventRecord(ev0, stream), "cudaEventRecord");
      for (int i = 0; i < iters; ++i) launch_one();
      ck(cudaEventRecord(ev1, stream), "cudaEventRecord");
      ck(cudaEventSynchronize(ev1), "timing: sync");
      r.us.push_back(elapsed_ms() * 1000.0 / iters);
    }
    ck(cudaGetLastError(), "timing");
    ck(cudaDeviceSynchronize(), "timing: final sync");
    if (opt.repeats > 0) r.graph_error = time_graph(iters, r.us_graph);
  }

  // Capture `iters` launches (rotating through the sets from set 0) once, replay once untimed, then once per
  // repeat between events. Returns "" or why the graph could not be timed; never throws, never fails the point.
  std::string time_graph(int iters, std::vector<double>& us_graph) {
    int N = opt.rotate;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::string why;
    auto cuda = [&](cudaError_t e, const char* what) {
      if (e != cudaSuccess && why.empty()) why = std::string(what) + ": " + cudaGetErrorName(e) + " — " + cudaGetErrorString(e);
      return why.empty();
    };
    if (cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
      for (int i = 0; i < iters && why.empty(); ++i) {
        cutlass::Status st = gemms[i % N].run(stream, &g_kernel);
        if (st != cutlass::Status::kSuccess) why = step_fail("capture: run", status_name(st), cudaGetLastError());
      }
      cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");  // always ends the capture
    }
    if (why.empty()) cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    if (why.empty()) cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch (warm-up)");
    if (why.empty()) cuda(cudaStreamSynchronize(stream), "graph warm-up sync");
    while (why.empty() && another_repeat(us_graph)) {
      if (!cuda(cudaEventRecord(ev0, stream), "cudaEventRecord") || !cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch") ||
          !cuda(cudaEventRecord(ev1, stream), "cudaEventRecord") || !cuda(cudaEventSynchronize(ev1), "graph replay sync"))
        break;
      float ms = 0;
      if (cuda(cudaEventElapsedTime(&ms, ev0, ev1), "cudaEventElapsedTime")) us_graph.push_back(double(ms) * 1000.0 / iters);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture leaves a non-sticky error behind; a sticky one shows at the point's end
    if (!why.empty()) us_graph.clear();
    return why;
  }

  // --reference-dump files: raw bytes into DIR/name, from the host or the device.
  static void write_host(const std::string& dir, const std::string& name, const void* host, size_t bytes) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(static_cast<const char*>(host), std::streamsize(bytes));
    if (!f) throw Failure{"cannot write " + dir + "/" + name};
  }
  static void write_device(const std::string& dir, const std::string& name, const void* dev, size_t bytes) {
    std::vector<char> host(bytes);
    ck(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(" + name + ")");
    write_host(dir, name, host.data(), bytes);
  }

  // --reference-dump: group 0 of set 0, raw operand bytes and the fp32 reference (beta = 0, no C, alpha = group 0's
  // alpha); then whatever the family adds (FlashInfer's finalize: every group and the routed output's reference).
  std::string dump(const std::string& dir) {
    if constexpr (!Cfg::BlockScaled) {
      throw Failure{"--reference-dump is only for block-scaled builds"};
    } else {
      allocate(1);
      const Problem& p = probs[0];
      const GroupBufs& b = sets[0].g[0];
      size_t mn = size_t(p.m) * p.n;
      float* d_ref = static_cast<float*>(dalloc(mn * sizeof(float), "reference"));
      reference(0, 0, 0.0f, false, d_ref);
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw Failure{"mkdir(" + dir + "): " + std::strerror(errno)};
      write_device(dir, "A.bin", b.a, b.a_bytes);
      write_device(dir, "B.bin", b.b, b.b_bytes);
      write_device(dir, "SFA.bin", b.sfa, b.sfa_bytes);
      write_device(dir, "SFB.bin", b.sfb, b.sfb_bytes);
      write_device(dir, "D_ref.bin", d_ref, mn * sizeof(float));
      Json meta;
      meta.add("M", jint(p.m)).add("N", jint(p.n)).add("K", jint(p.k));
      meta.add("alpha", jnum(h_alpha[0])).add("sfa_bytes", jint((long long)b.sfa_bytes)).add("sfb_bytes", jint((long long)b.sfb_bytes));
      meta.add("bits_a", jint(kBitsA)).add("bits_b", jint(kBitsB)).add("sf_vector", jint(Cfg::SFVector));
      fam.dump(*this, dir, meta);
      std::ofstream f(dir + "/meta.json");
      f << meta.str() << "\n";
      if (!f) throw Failure{"cannot write " + dir + "/meta.json"};
      return meta.body;
    }
  }
};
