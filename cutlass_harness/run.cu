// tileprobe runtime harness: launches one compiled grouped-GEMM config, checks it element by element against an
// independent reference kernel, and times it (plain launches and a CUDA-graph replay), for each workload point of the
// problems file. Each point is announced on stdout before any work on it, and its result follows as soon as it is
// done (both flushed), so a later crash or hang loses nothing and names the point it happened on; diagnostics go to
// stderr. The stdout protocol, options, env vars and exit codes are specified in PROTOCOL.md.
//
// Built with -DTP_FAMILY_KERNEL=<template from kernels.cuh> -DTP_ARCH=<90|120|121> and an include path holding
// tp_configs.inc, a generated file with exactly one TP_CFG(idx, <the family template's arguments>) line, e.g.
// TP_CFG(idx, TM, TN, TK, Sched, Stages, Epi, Swap) for sm90-fp8 / sm120-nvfp4 and
// TP_CFG(idx, TM, TN, TKBytes, Dtypes, Finalize, SwapAB, Arch, ClusterM, ClusterN, OutF16) for flashinfer-moe.

// Device-side assert() in CUTLASS kernels is a function call that makes ptxas serialize wgmma (warning C7510) and
// skews timings; release builds of CUTLASS define NDEBUG, so this harness does too.
#ifndef NDEBUG
#define NDEBUG
#endif
#if defined(__CUDA_ARCH__) && defined(TP_DEVICE_PASS_HEADER)
// The device pass, where the family names its operand types: the harness's own kernels only (device_pass.cuh). The
// GEMM kernel is kernel.cu's; this pass would otherwise parse every CUTLASS GEMM header again to compile no GEMM.
#include "device_pass.cuh"
#else
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels.cuh"
#include "describe.cuh"
#include "harness_io.cuh"
#include "faults.cuh"
#include "harness.cuh"
#ifdef TP_DEVICE_PASS_HEADER
#include "device_pass.cuh"
#endif
#ifdef TP_FAMILY_FLASHINFER_MOE
#include "families/flashinfer_moe_run.cuh"  // this family's launch arguments, MoE routing and finalize check
#endif

#ifndef TP_FAMILY_KERNEL
#error "TP_FAMILY_KERNEL must name a kernel template from kernels.cuh"
#endif
#ifndef TP_ARCH
#error "TP_ARCH must be the compute capability the binary is built for (90, 120, 121)"
#endif

// The harness's configs: one TP_CFG(idx, ...) and one TP_CFG_ID(idx, "name") line each (build.py). A split build's
// host half may serve several configs of a family (each with its own kernel.<idx>.cubin): `--config-index I` picks
// one (default 0), and everything below is that config's.
static int g_config_index = 0;
int tp_config_index() { return g_config_index; }
const char* tp_config_id() {
  switch (g_config_index) {
#define TP_CFG(idx, ...)
#define TP_CFG_ID(idx, name) \
  case idx:                  \
    return name;
#include "tp_configs.inc"
#undef TP_CFG_ID
#undef TP_CFG
  }
  return "";
}

// "--config-index I" (or "--config-index=I") taken out of argv; -1 when it is not a config index.
static int take_config_index(int& argc, char** argv) {
  int index = 0;
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i], val;
    int used = 1;
    if (key.rfind("--config-index=", 0) == 0) val = key.substr(15);
    else if (key == "--config-index" && i + 1 < argc) { val = argv[i + 1]; used = 2; }
    else if (key == "--config-index") return -1;
    else continue;
    char* end = nullptr;
    long v = std::strtol(val.c_str(), &end, 10);
    if (end == val.c_str() || *end || v < 0 || v > 1000000) return -1;
    index = int(v);
    for (int j = i; j + used < argc; ++j) argv[j] = argv[j + used];
    argc -= used;
    --i;
  }
  return index;
}

template <class K>
int harness_main(int kCfgIndex, int argc, char** argv) {
#ifdef TP_DEVICE_PASS_HEADER
  static_assert(std::is_same_v<typename Harness<K>::Ops, tileprobe::DevicePassOps>,
                "TP_DEVICE_PASS_HEADER names other operand types than this config's reference reads");
#endif
  // --describe: the config's sizes from this very binary (describe.cuh; no GPU, no other option but
  // --config-index): the static probe reads them from the harness it launches, so one compile serves both.
  if (argc == 2 && std::string(argv[1]) == "--describe") {
    tileprobe_describe::describe<K>(kCfgIndex);
    return 0;
  }
  Options opt = parse_args(argc, argv);
  Fault fault = read_fault();
  std::vector<PointSpec> points = read_points(opt.problems, opt.rotate);

  // 1. The device.
  cudaDeviceProp prop{};
  int cc = -1, optin = 0, sms = 0, l2 = 0;
  cudaError_t dev_err = cudaSetDevice(opt.device);
  // Waits (event and stream syncs) block instead of spinning: the main job compiles other configs on every core while
  // a harness runs, and a spinning wait would hold one of them. Timings are CUDA-event times, not the host's.
  if (dev_err == cudaSuccess && cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess) cudaGetLastError();
  if (dev_err == cudaSuccess) dev_err = cudaGetDeviceProperties(&prop, opt.device);
  if (dev_err == cudaSuccess) dev_err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, opt.device);
  if (dev_err == cudaSuccess) dev_err = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, opt.device);
  if (dev_err == cudaSuccess) {
    cc = prop.major * 10 + prop.minor;
    sms = prop.multiProcessorCount;
  }
  auto header = [&](Json& j) {
    j.add("arch_built", jint(TP_ARCH)).add("index", jint(kCfgIndex));
    j.add("device_cc", cc >= 0 ? jint(cc) : "null");
    j.add("device_name", dev_err == cudaSuccess ? jstr(prop.name) : "null");
    j.add("smem_optin", jint(optin)).add("sm_count", jint(sms));
    j.add("l2_bytes", dev_err == cudaSuccess ? jint(l2) : "null");
  };

  // 7. Reference dump mode: no CUTLASS launch, any arch; first point only.
  if (!opt.dump_dir.empty()) {
    if (!K::BlockScaled) usage("--reference-dump needs an nvfp4 (block-scaled) build");
    Harness<K> h(opt, fault, points[0].id, points[0].probs, opt.device, sms);
    Json j;
    j.add("event", jstr("reference-dump"));
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
    emit_line(j.str());
    return 0;
  }

  char buf[256];
  for (const PointSpec& point : points) {
    emit_line(Json().add("event", jstr("start")).add("point", jint(point.id)).str());
    Options popt = opt;
    popt.rotate = point.rotate;
    Harness<K> h(popt, fault, point.id, point.probs, opt.device, sms);
    Json j;
    j.add("event", jstr("result"));
    header(j);
    j.add("point", jint(point.id));
    j.add("smem_bytes", jint((long long)sizeof(typename K::GemmKernel::SharedStorage)));
    j.add("stages", jint(int(K::CollectiveMainloop::DispatchPolicy::Stages)));
    j.add("groups", jint((long long)point.probs.size()));

    std::string status = "ok", reason;
    Result r;
    double ms_free = -1;
    bool sticky = false;
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
        h.launch(r);
      } catch (const Failure& f) {
        status = "launch-error";
        reason = f.reason;
        std::fprintf(stderr, "launch-error: %s\n", reason.c_str());
      }
      // A sticky error (illegal address, ...) poisons the context: report this point and stop; the caller starts
      // a fresh process for the points that remain.
      cudaError_t after = cudaDeviceSynchronize();
      sticky = after != cudaSuccess;
      if (sticky && status == "ok") {
        status = "launch-error";
        reason = std::string("sticky CUDA error after the point: ") + cudaGetErrorName(after) + " — " + cudaGetErrorString(after);
      }
      auto t_free = std::chrono::steady_clock::now();
      h.release();
      free_point_allocs();
      ms_free = ms_since(t_free);
    }

    std::string steps;
    for (auto& [name, obj] : h.steps) steps += (steps.empty() ? "" : ", ") + jstr(name) + ": " + obj;
    j.add("steps", "{" + steps + "}");
    j.add("launch_status", jstr(status)).add("launch_reason", reason.empty() ? "null" : jstr(reason));
    auto chk = [&](const std::string& v) { return r.checked ? v : std::string("null"); };
    j.add("rel_err", chk(jnum(r.rel_err))).add("nonfinite", chk(jint(r.nonfinite)));
    j.add("atol", jnum(opt.atol)).add("rtol", jnum(opt.rtol));
    j.add("checked_elements", chk(jint(r.checked_elements))).add("bad_elements", chk(jint(r.bad_elements)));
    j.add("bad_groups", chk(jint(r.bad_groups))).add("worst_group", chk(jint(r.worst_group)));
    j.add("worst_row", chk(jint(r.worst_row))).add("worst_col", chk(jint(r.worst_col)));
    j.add("worst_token", r.worst_token >= 0 ? chk(jint(r.worst_token)) : "null");
    j.add("worst_value", chk(jnum(r.worst_value))).add("worst_ref", chk(jnum(r.worst_ref)));
    j.add("worst_ratio", chk(jnum(r.worst_ratio)));
    j.add("us", jlist(r.us)).add("us_graph", jlist(r.us_graph));
    j.add("graph_error", r.graph_error.empty() ? "null" : jstr(r.graph_error));
    j.add("iters", jint(r.iters)).add("rotate", jint(popt.rotate));
    j.add("phase_ms", Json().add("allocate", jnum(r.ms_allocate)).add("first_run", jnum(r.ms_first_run))
                          .add("check", jnum(r.ms_check)).add("time", jnum(r.ms_time)).add("free", jnum(ms_free)).str());
    j.add("set_bytes", jint((long long)h.set_bytes)).add("rotation_bytes", jint((long long)(h.set_bytes * h.sets_allocated)));
    j.add("tokens", Harness<K>::Fam::kFinalize ? jint(h.fam.tokens) : "null");
    j.add("topk", Harness<K>::Fam::kFinalize ? jint(h.fam.topk) : "null");
    emit_line(j.str());
    if (sticky) return 3;
  }
  return 0;
}

int main(int argc, char** argv) {
  g_config_index = take_config_index(argc, argv);
  if (g_config_index < 0) usage("--config-index takes a config index of this harness (0, 1, ...)");
#define TP_CFG(idx, ...) \
  if (g_config_index == idx) return harness_main<tileprobe::TP_FAMILY_KERNEL<__VA_ARGS__>>(idx, argc, argv);
#define TP_CFG_ID(idx, name)
#include "tp_configs.inc"
#undef TP_CFG_ID
#undef TP_CFG
  usage("--config-index " + std::to_string(g_config_index) + ": this harness has no such config");
}
#endif  // the device pass of a family with TP_DEVICE_PASS_HEADER
