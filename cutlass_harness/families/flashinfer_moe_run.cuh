// tileprobe runtime harness, family flashinfer-moe: how FlashInfer's MoE launcher (moe_gemm_tma_ws_launcher.inl)
// fills the kernel's arguments, and, for the finalize (scatter) epilogue, a synthetic MoE routing, the output it
// scatters into and an independent check of that output. Included by run.cu only for this family (after
// harness.cuh); everything else (steps, timing, protocol) is the generic harness. Contract: PROTOCOL.md.
//
// Default epilogue (gemm1): the launcher's !IsSimpleAlphaBeta branch (the epilogue scalars are an aggregate, so under
// C++17 not constructible from (alpha, beta)): alpha 1, beta 0, a per-expert alpha pointer array with dAlpha
// {0, 0, 1} (the FP8 dequant scale, one float per expert), no C (ptr_C and dC null), D and its strides per group.
// Finalize epilogue (gemm2): alpha pointer array as above, no bias, router scales and source-token indices per
// expert (pointer arrays into per-expanded-row arrays), the final output with the engine's packed stride (token-major
// T x H; its transpose under swap-AB), index_modulo = tokens, shape_override = hidden, use_reduction = expanded rows >
// tokens (FlashInfer's rule); no D. Both: host problem shapes null (the grid is sm_count CTAs, as in the engine) and
// the tile scheduler at max_swizzle 1, raster along N.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "cutlass/util/packed_stride.hpp"
#include "families/flashinfer_moe.cuh"
#include "harness.cuh"

namespace fimoe_run {

// The MoE inputs of a finalize point, built on the host from the problem list (PROTOCOL.md, "flashinfer-moe").
// Expanded rows are numbered in expert order (expert 0's rows first, then expert 1's, ...), as the engine permutes
// them. Row i sits at position j = i mod T and is the (i / T)-th expert of the token at that position: with
// T = max(ceil(S / topk), max rows of one expert) every token has 1 .. topk distinct experts and each expert's rows
// go to distinct tokens. Positions map to tokens through a seeded random permutation.
struct Routing {
  long long tokens = 0, rows = 0;  // T and S
  int topk = 0, hidden = 0;        // topk: the most experts any token has (= ceil(S / T))
  std::vector<long long> row0;     // G + 1: first expanded row of each expert
  std::vector<int> row_expert;     // S: expert of each expanded row
  std::vector<int> row_index;      // S: source index, (i / T) * T + token (the engine's k * num_tokens + token)
  std::vector<float> row_scale;    // S: router scale, uniform [0.1, 1)
  std::vector<int> order;          // T: token at each position; positions are in first-expert order
  std::vector<long long> first;    // G + 1: positions [first[g], first[g + 1]) have first expert g
  std::string error;               // non-empty: the problem list cannot be a finalize point
};

inline float unit(uint64_t seed, uint64_t i) { return float(mix64(seed ^ mix64(i)) >> 40) * (1.0f / 16777216.0f); }

inline Routing build_routing(const std::vector<Problem>& probs, bool swap, int topk, uint64_t seed) {
  Routing r;
  int G = int(probs.size());
  r.hidden = swap ? probs[0].m : probs[0].n;
  long long max_rows = 0;
  r.row0.push_back(0);
  for (const Problem& p : probs) {
    if ((swap ? p.m : p.n) != r.hidden) {
      r.error = "finalize needs one hidden size: every group's " + std::string(swap ? "M" : "N") + " must be equal";
      return r;
    }
    long long rows = swap ? p.n : p.m;
    max_rows = std::max(max_rows, rows);
    r.row0.push_back(r.row0.back() + rows);
  }
  r.rows = r.row0.back();
  r.tokens = std::max((r.rows + topk - 1) / topk, max_rows);
  if (r.tokens > 0x7FFFFFFFll || r.rows > 0x7FFFFFFFll) {
    r.error = "finalize: too many expanded rows for 32-bit token indices";
    return r;
  }
  r.topk = int((r.rows + r.tokens - 1) / r.tokens);
  r.order.resize(size_t(r.tokens));
  std::iota(r.order.begin(), r.order.end(), 0);
  uint64_t s = mix64(seed * 0x9E3779B97F4A7C15ull + 0x70CE);
  for (long long j = r.tokens - 1; j > 0; --j) std::swap(r.order[size_t(j)], r.order[size_t(mix64(s ^ uint64_t(j)) % uint64_t(j + 1))]);
  r.row_expert.resize(size_t(r.rows));
  r.row_index.resize(size_t(r.rows));
  r.row_scale.resize(size_t(r.rows));
  for (int g = 0; g < G; ++g)
    for (long long i = r.row0[g]; i < r.row0[g + 1]; ++i) {
      r.row_expert[size_t(i)] = g;
      r.row_index[size_t(i)] = int((i / r.tokens) * r.tokens + r.order[size_t(i % r.tokens)]);
      r.row_scale[size_t(i)] = 0.1f + 0.9f * unit(s + 1, uint64_t(i));
    }
  for (int g = 0; g <= G; ++g) r.first.push_back(std::min(r.row0[g], r.tokens));
  return r;
}

// Independent reference of the finalize output, one thread per (position, hidden column), fp32 accumulation with the
// harness's own decoders (Ops: each operand as its element type, e2m1 / e4m3, times its ue4m3 / ue8m0 scale factor
// read through the kernel's SF layout): ref[p][c] = sum over the token's expanded rows i of
// scale_i * alpha_e * (act_i . w_e,c), act_i = row (i - row0[e]) of expert e's activations, w_e,c = row c of its
// weights. Without swap-AB, A holds the activations (rows x K) and B the weights (hidden x K); with it, the reverse.
template <class Ops>
struct FinalizeRef {
  const Ops* ops;  // per expert, set 0
  const long long* row0;
  const int* row_expert;
  const float* row_scale;
  const float* alpha;
  long long tokens, rows;
  int hidden;
  bool swap;
};

template <class Ops>
__global__ void finalize_reference_kernel(FinalizeRef<Ops> r, float* ref) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= r.hidden) return;
  for (long long p = blockIdx.y; p < r.tokens; p += gridDim.y) {
    float out = 0.0f;
    for (long long i = p; i < r.rows; i += r.tokens) {
      int e = r.row_expert[i];
      const Ops& o = r.ops[e];
      long long local = i - r.row0[e];
      float acc = 0.0f;
      for (int k = 0; k < o.k; ++k) acc += r.swap ? o.A(c, k) * o.B(local, k) : o.A(local, k) * o.B(c, k);
      out += r.row_scale[i] * (r.alpha[e] * acc);
    }
    ref[size_t(p) * r.hidden + c] = out;
  }
}

// The kernel's token-major output rows, copied into position order (so each first-expert group is contiguous).
__global__ void gather_rows_kernel(const cutlass::bfloat16_t* out, const int* order, long long tokens, int hidden,
                                   cutlass::bfloat16_t* sorted) {
  size_t n = size_t(tokens) * hidden;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    sorted[i] = out[size_t(order[i / hidden]) * hidden + i % hidden];
}

// TILEPROBE_FAULT corrupt on a finalize point: positions p0 .. p0+rows-1, columns 0 .. cols-1 of the output.
__global__ void corrupt_token_rows_kernel(cutlass::bfloat16_t* out, const int* order, long long p0, int rows, int cols,
                                          int hidden) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += gridDim.x * blockDim.x) {
    cutlass::bfloat16_t& e = out[size_t(order[p0 + i / cols]) * hidden + i % cols];
    float v = float(e);
    e = cutlass::bfloat16_t(-(v + copysignf(8.0f, v)));
  }
}

}  // namespace fimoe_run

template <int TM, int TN, int TKBytes, int Dtypes, int Finalize, int SwapAB, int Arch, int ClusterM, int ClusterN,
          int OutF16>
struct FamilyRun<tileprobe::FlashinferMoeKernel<TM, TN, TKBytes, Dtypes, Finalize, SwapAB, Arch, ClusterM, ClusterN, OutF16>> {
  using Cfg = tileprobe::FlashinferMoeKernel<TM, TN, TKBytes, Dtypes, Finalize, SwapAB, Arch, ClusterM, ClusterN, OutF16>;
  static constexpr bool kFinalize = Finalize != 0;
  static constexpr bool kGroupD = !kFinalize;
  static constexpr bool kHostShapes = false;  // the engine passes host_problem_shapes = nullptr
  static_assert(OutF16 == 0, "the runtime harness checks bf16 outputs only");
  using Out = cutlass::bfloat16_t;

  fimoe_run::Routing rt;
  long long tokens = 0;
  int topk = 0;
  float* d_alpha = nullptr;          // per expert
  float const** d_alpha_ptrs = nullptr;  // per expert: d_alpha + g (the engine's alpha_scale_ptr_array)
  int* d_order = nullptr;            // finalize: position -> token
  struct SetOut {
    Out* out = nullptr;
    float const** scales = nullptr;  // per expert: router scales of its expanded rows
    int const** index = nullptr;     // per expert: source indices of its expanded rows
  };
  std::vector<SetOut> outs;

  size_t out_bytes() const { return size_t(rt.tokens) * rt.hidden * sizeof(Out); }

  template <class H>
  void prepare(H& h) {
    int G = int(h.probs.size());
    for (int g = 0; g < G; ++g)  // alpha_g = --alpha x uniform [0.5, 1.5): non-zero, different per expert
      h.h_alpha.push_back(h.opt.alpha * (0.5f + fimoe_run::unit(mix64(h.opt.seed + 0xA1FA), uint64_t(g))));
    if constexpr (kFinalize) {
      rt = fimoe_run::build_routing(h.probs, SwapAB != 0, h.opt.topk, h.opt.seed);
      tokens = rt.tokens;
      topk = rt.topk;
    }
  }

  template <class H>
  size_t extra_set_bytes(const H&) const {
    if constexpr (kFinalize) return rt.error.empty() ? out_bytes() + size_t(rt.rows) * 8 : 0;
    return 0;
  }

  template <class H>
  void allocate(H& h, int nsets) {
    int G = int(h.probs.size());
    d_alpha = upload(h.h_alpha, "alpha");
    std::vector<float const*> ap;
    for (int g = 0; g < G; ++g) ap.push_back(d_alpha + g);
    d_alpha_ptrs = upload(ap, "alpha pointer array");
    if constexpr (kFinalize) {
      if (!rt.error.empty()) throw Failure{rt.error};
      d_order = upload(rt.order, "token order");
      outs.resize(nsets);
      for (int s = 0; s < nsets; ++s) {  // each set: its own output, scales and indices (same values)
        outs[s].out = static_cast<Out*>(dalloc(out_bytes(), "finalize output, set " + std::to_string(s)));
        ck(cudaMemset(outs[s].out, 0, out_bytes()), "cudaMemset(finalize output)");
        float* sc = upload(rt.row_scale, "router scales");
        int* ix = upload(rt.row_index, "source token index");
        std::vector<float const*> sp;
        std::vector<int const*> ip;
        for (int g = 0; g < G; ++g) sp.push_back(sc + rt.row0[g]), ip.push_back(ix + rt.row0[g]);
        outs[s].scales = upload(sp, "router scale pointer array");
        outs[s].index = upload(ip, "source index pointer array");
      }
    }
  }

  bool use_reduction() const { return rt.rows > rt.tokens; }

  template <class H, class Args>
  void epilogue(H& h, int s, Args& args) {
    auto& ep = args.epilogue;
    auto& t = ep.thread;
    t.alpha = 1.0f;
    t.alpha_ptr = nullptr;
    t.alpha_ptr_array = d_alpha_ptrs;
    t.dAlpha = decltype(t.dAlpha){cute::_0{}, cute::_0{}, int64_t(1)};
    ep.ptr_C = nullptr;
    ep.dC = nullptr;
    if constexpr (kFinalize) {
      t.bias_ptr = nullptr;
      t.scale_ptr_array = outs[s].scales;
      t.ptr_out = outs[s].out;
      using StrideOut = std::remove_reference_t<decltype(t.dOut)>;
      t.dOut = SwapAB ? cutlass::make_cute_packed_stride(StrideOut{}, cute::make_shape(rt.hidden, int(rt.tokens), 1))
                      : cutlass::make_cute_packed_stride(StrideOut{}, cute::make_shape(int(rt.tokens), rt.hidden, 1));
      t.ptr_index = outs[s].index;
      t.index_modulo = int(rt.tokens);
      t.shape_override = rt.hidden;
      t.use_reduction = use_reduction();
      ep.ptr_D = nullptr;
      ep.dD = nullptr;
    } else {
      t.beta = 0.0f;
      ep.ptr_D = H::template as<decltype(ep.ptr_D)>(h.sets[s].ptrs[5]);
      ep.dD = h.d_sd;
    }
    args.scheduler.max_swizzle_size = 1;
    args.scheduler.raster_order = decltype(args.scheduler.raster_order)::AlongN;
  }

  // The scatter accumulates (red.add) when tokens have several experts: zeros then; with plain stores, NaN poison.
  template <class H>
  void before_first_run(H& h) {
    if constexpr (kFinalize) {
      bool poison = h.opt.check && !use_reduction();
      ck(cudaMemset(outs[0].out, poison ? 0xFF : 0, out_bytes()), "cudaMemset(finalize output)");
    } else {
      h.poison_group_d();
    }
  }

  template <class H>
  void corrupt(H& h, int g) {
    if constexpr (kFinalize) {
      int G = int(h.probs.size());
      long long n = g < G ? rt.first[g + 1] - rt.first[g] : 0;
      if (n <= 0)
        throw Failure{"TILEPROBE_FAULT corrupt: group " + std::to_string(g) + " is no token's first expert (the point has " +
                      std::to_string(G) + " groups, " + std::to_string(rt.tokens) + " tokens)"};
      int rows = int(std::min<long long>(n, kCorruptRows)), cols = std::min(rt.hidden, kCorruptCols);
      std::fprintf(stderr, "TILEPROBE_FAULT corrupt: point %lld group %d, %d tokens x %d columns of the output\n",
                   h.point_id, g, rows, cols);
      fimoe_run::corrupt_token_rows_kernel<<<32, 256>>>(outs[0].out, d_order, rt.first[g], rows, cols, rt.hidden);
      ck(cudaGetLastError(), "corrupt kernel launch");
      ck(cudaDeviceSynchronize(), "corrupt kernel");
    } else {
      h.corrupt_group_d(g);
    }
  }

  template <class H>
  void check(H& h, Result& r) {
    if constexpr (kFinalize) check_finalize(h, r);
    else h.check_groups(r);
  }

  // The fp32 reference of the whole finalize output, T x H in position order (set 0), launched on the default stream.
  template <class H>
  float* finalize_reference(H& h) {
    std::vector<typename H::Ops> ops;
    for (int g = 0; g < int(h.probs.size()); ++g) ops.push_back(h.operands(0, g));
    fimoe_run::FinalizeRef<typename H::Ops> fr{upload(ops, "operands per expert"), upload(rt.row0, "expert row offsets"),
                                               upload(rt.row_expert, "row experts"),
                                               upload(rt.row_scale, "router scales (reference)"), d_alpha, rt.tokens,
                                               rt.rows, rt.hidden, SwapAB != 0};
    float* d_ref = static_cast<float*>(dalloc(size_t(rt.tokens) * rt.hidden * sizeof(float), "finalize reference"));
    dim3 block(128), grid((rt.hidden + 127) / 128, unsigned(std::min<long long>(rt.tokens, 65535)));
    fimoe_run::finalize_reference_kernel<<<grid, block>>>(fr, d_ref);
    ck(cudaGetLastError(), "finalize reference launch");
    return d_ref;
  }

  // --reference-dump of a finalize build: every group's operands (A_g.bin, B_g.bin, SFA_g.bin, SFB_g.bin), the
  // routing (row_index.bin int32 per expanded row in expert order, row_scale.bin float32, order.bin int32 token per
  // position, alpha.bin float32 per expert, rows_per_group in meta) and F_ref.bin (T x H float32, position order).
  template <class H>
  void dump(H& h, const std::string& dir, Json& meta) {
    if constexpr (kFinalize) {
      int G = int(h.probs.size());
      std::string rows;
      for (int g = 0; g < G; ++g) {
        const auto& b = h.sets[0].g[g];
        std::string t = "_" + std::to_string(g) + ".bin";
        H::write_device(dir, "A" + t, b.a, b.a_bytes);
        H::write_device(dir, "B" + t, b.b, b.b_bytes);
        H::write_device(dir, "SFA" + t, b.sfa, b.sfa_bytes);
        H::write_device(dir, "SFB" + t, b.sfb, b.sfb_bytes);
        rows += (g ? ", " : "") + jint(rt.row0[g + 1] - rt.row0[g]);
      }
      H::write_host(dir, "row_index.bin", rt.row_index.data(), rt.row_index.size() * sizeof(int));
      H::write_host(dir, "row_scale.bin", rt.row_scale.data(), rt.row_scale.size() * sizeof(float));
      H::write_host(dir, "order.bin", rt.order.data(), rt.order.size() * sizeof(int));
      H::write_host(dir, "alpha.bin", h.h_alpha.data(), h.h_alpha.size() * sizeof(float));
      float* d_ref = finalize_reference(h);
      ck(cudaDeviceSynchronize(), "finalize reference");
      H::write_device(dir, "F_ref.bin", d_ref, size_t(rt.tokens) * rt.hidden * sizeof(float));
      meta.add("groups", jint(G)).add("tokens", jint(rt.tokens)).add("hidden", jint(rt.hidden));
      meta.add("swap_ab", SwapAB ? "true" : "false").add("rows_per_group", "[" + rows + "]");
      std::string kl;
      for (int g = 0; g < G; ++g) kl += (g ? ", " : "") + jint(h.probs[g].k);
      meta.add("k_per_group", "[" + kl + "]");
    }
  }

  // Finalize: the reference of every token in position order, the output gathered into the same order, then the
  // generic compare per first-expert group of tokens (its rows contiguous there; atol in units of that group's RMS).
  template <class H>
  void check_finalize(H& h, Result& r) {
    int G = int(h.probs.size());
    size_t n = size_t(rt.tokens) * rt.hidden;
    for (int g = 0; g < G; ++g)
      if (size_t(rt.first[g + 1] - rt.first[g]) * rt.hidden >= 0xFFFFFFFFull)
        throw Failure{"check: a group's tokens x hidden reaches 2^32 elements; the check indexes with 32 bits"};
    float* d_ref = finalize_reference(h);
    Out* d_sorted = static_cast<Out*>(dalloc(n * sizeof(Out), "finalize output, by position"));
    GroupStats* d_st = static_cast<GroupStats*>(dalloc(G * sizeof(GroupStats), "compare stats"));
    ck(cudaMemset(d_st, 0, G * sizeof(GroupStats)), "cudaMemset(compare stats)");
    int gb = int(std::min<size_t>((n + 255) / 256, 4096));
    fimoe_run::gather_rows_kernel<<<gb, 256>>>(outs[0].out, d_order, rt.tokens, rt.hidden, d_sorted);
    ck(cudaGetLastError(), "finalize reference / gather launch");
    for (int g = 0; g < G; ++g) {
      long long rows = rt.first[g + 1] - rt.first[g];
      if (rows <= 0) continue;
      size_t off = size_t(rt.first[g]) * rt.hidden, mn = size_t(rows) * rt.hidden;
      int blocks = int(std::min<size_t>((mn + kCompareThreads - 1) / kCompareThreads, 2048));
      ref_sq_kernel<<<blocks, kCompareThreads>>>(d_ref + off, mn, d_st + g);
      compare_kernel<<<blocks, kCompareThreads>>>(d_sorted + off, d_ref + off, int(rows), rt.hidden, false, h.opt.atol,
                                                  h.opt.rtol, d_st + g);
      worst_values_kernel<<<1, 1>>>(d_sorted + off, d_ref + off, int(rows), rt.hidden, false, d_st + g);
      ck(cudaGetLastError(), "compare kernel launch");
    }
    ck(cudaDeviceSynchronize(), "finalize reference and compare kernels");
    std::vector<GroupStats> st(G);
    ck(cudaMemcpy(st.data(), d_st, G * sizeof(GroupStats), cudaMemcpyDeviceToHost), "cudaMemcpy(compare stats)");
    H::fold_stats(st, r, [&](int g) { return rt.first[g + 1] > rt.first[g]; }, [&](int g, size_t i) {
      r.worst_token = rt.order[size_t(rt.first[g] + (long long)(i / size_t(rt.hidden)))];
      r.worst_row = r.worst_token;
      r.worst_col = (long long)(i % size_t(rt.hidden));
    });
  }
};
