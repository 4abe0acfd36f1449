// tileprobe layout dump: the offset and size of every member of a kernel's SharedStorage, for the configs in
// tp_configs.inc. Host only, no GPU. It is how tileprobe/predict's rules were checked member by member against the
// compiler (tileprobe/predict/README.md); the predictor itself never needs it.
//
// Built like describe.cu: -DTP_FAMILY_KERNEL=<template> -DTP_FAMILY_SM=<90|120>, and an include path holding
// tp_configs.inc with TP_CFG(idx, TM, TN, TK, Sched, Stages, Epi, Swap) lines. One JSON object per config.
#include <cstddef>
#include <cstdio>
#include <utility>
#include <type_traits>
#include <tuple>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

// The epilogue keeps its smem layouts private; this calibration tool reads them.
#define private public
#define protected public
#include "kernels.cuh"
#undef private
#undef protected

#ifndef TP_FAMILY_KERNEL
#error "TP_FAMILY_KERNEL must name a kernel template from kernels.cuh"
#endif

namespace {

template <class T>
struct Id {
  using type = T;
};

#define TP_OFF(T, m) static_cast<unsigned long>(offsetof(typename Id<T>::type, m))
#define TP_SZ(T, m) static_cast<unsigned long>(sizeof(std::declval<typename Id<T>::type>().m))

template <class T, class = void>
struct HasMathOrder : cute::false_type {};
template <class T>
struct HasMathOrder<T, cute::void_t<decltype(std::declval<T>().math_wg_order)>> : cute::true_type {};

template <class K>
void dump(int index) {
  using GemmKernel = typename K::GemmKernel;
  using ML = typename K::CollectiveMainloop;
  using EP = typename K::CollectiveEpilogue;
  using MS = typename ML::SharedStorage;
  using MT = typename MS::TensorStorage;
  using ES = typename EP::SharedStorage;
  using ET = typename ES::TensorStorage;
  using KS = typename GemmKernel::SharedStorage;
  using KP = typename KS::PipelineStorage;
  std::printf("{\"index\": %d, \"stages\": %d", index, static_cast<int>(ML::DispatchPolicy::Stages));
  // mainloop
  std::printf(", \"ml_size\": %lu, \"ml_align\": %lu, \"ml_tensors_size\": %lu, \"ml_tensormaps_off\": %lu",
              (unsigned long)sizeof(MS), (unsigned long)alignof(MS), (unsigned long)sizeof(MT), TP_OFF(MS, tensormaps));
  std::printf(", \"ml_tensormaps_size\": %lu", TP_SZ(MS, tensormaps));
  std::printf(", \"A_off\": %lu, \"A_size\": %lu, \"B_off\": %lu, \"B_size\": %lu", TP_OFF(MT, smem_A),
              TP_SZ(MT, smem_A), TP_OFF(MT, smem_B), TP_SZ(MT, smem_B));
#if TP_FAMILY_SM == 120
  std::printf(", \"SFA_off\": %lu, \"SFA_size\": %lu, \"SFB_off\": %lu, \"SFB_size\": %lu", TP_OFF(MT, smem_SFA),
              TP_SZ(MT, smem_SFA), TP_OFF(MT, smem_SFB), TP_SZ(MT, smem_SFB));
  std::printf(", \"ml_pipe_off\": %lu, \"ml_pipe_size\": %lu", TP_OFF(MS, pipeline_storage), TP_SZ(MS, pipeline_storage));
  std::printf(", \"sfa_cosize\": %d, \"sfb_cosize\": %d", (int)cute::cosize_v<typename ML::SmemLayoutSFA>,
              (int)cute::cosize_v<typename ML::SmemLayoutSFB>);
#else
  std::printf(", \"ml_pipe_off\": %lu, \"ml_pipe_size\": %lu", TP_OFF(MS, pipeline), TP_SZ(MS, pipeline));
#endif
  // epilogue
  std::printf(", \"ep_size\": %lu, \"ep_align\": %lu, \"ep_tensors_size\": %lu, \"ep_tensors_align\": %lu",
              (unsigned long)sizeof(ES), (unsigned long)alignof(ES), (unsigned long)sizeof(ET), (unsigned long)alignof(ET));
  std::printf(", \"ep_collective_size\": %lu, \"ep_thread_off\": %lu, \"ep_thread_size\": %lu", TP_SZ(ET, collective),
              TP_OFF(ET, thread), TP_SZ(ET, thread));
  std::printf(", \"ep_tensormaps_off\": %lu, \"ep_tensormaps_size\": %lu, \"ep_pipe_off\": %lu, \"ep_pipe_size\": %lu",
              TP_OFF(ES, tensormaps), TP_SZ(ES, tensormaps), TP_OFF(ES, pipeline), TP_SZ(ES, pipeline));
  std::printf(", \"StagesC\": %d, \"StagesD\": %d, \"ReuseSmemC\": %d, \"SmemAlignmentC\": %lu, \"SmemAlignmentD\": %lu",
              (int)EP::StagesC, (int)EP::StagesD, (int)EP::ReuseSmemC, (unsigned long)EP::SmemAlignmentC,
              (unsigned long)EP::SmemAlignmentD);
  std::printf(", \"cosize_C\": %d, \"cosize_D\": %d, \"epi_tile\": [%d, %d]", (int)cute::cosize_v<typename EP::SmemLayoutC>,
              (int)cute::cosize_v<typename EP::SmemLayoutD>, (int)cute::size<0>(typename EP::EpilogueTile{}),
              (int)cute::size<1>(typename EP::EpilogueTile{}));
  // kernel
  std::printf(", \"k_size\": %lu, \"k_align\": %lu, \"k_tensors_size\": %lu, \"k_pipelines_off\": %lu, "
              "\"k_pipelines_size\": %lu, \"k_resp_off\": %lu, \"k_resp_size\": %lu, \"k_tensormaps_off\": %lu, "
              "\"k_tensormaps_size\": %lu",
              (unsigned long)sizeof(KS), (unsigned long)alignof(KS), TP_SZ(KS, tensors), TP_OFF(KS, pipelines),
              TP_SZ(KS, pipelines), TP_OFF(KS, scheduler_response), TP_SZ(KS, scheduler_response),
              TP_OFF(KS, tensormaps), TP_SZ(KS, tensormaps));
  std::printf(", \"kp_sched_size\": %lu, \"kp_ml_off\": %lu, \"kp_ml_size\": %lu, \"kp_epi_off\": %lu, "
              "\"kp_epi_size\": %lu, \"kp_order_off\": %lu, \"kp_order_size\": %lu",
              TP_SZ(KP, scheduler), TP_OFF(KP, mainloop), TP_SZ(KP, mainloop), TP_OFF(KP, epi_load),
              TP_SZ(KP, epi_load), TP_OFF(KP, load_order), TP_SZ(KP, load_order));
  if constexpr (HasMathOrder<KP>::value) {
    std::printf(", \"kp_math_off\": %lu, \"kp_math_size\": %lu", TP_OFF(KP, math_wg_order), TP_SZ(KP, math_wg_order));
  }
  std::printf("}\n");
}

}  // namespace

int main() {
#define TP_CFG(idx, tm, tn, tk, sched, stages, epi, swap) \
  dump<tileprobe::TP_FAMILY_KERNEL<tm, tn, tk, sched, stages, epi, swap>>(idx);
#include "tp_configs.inc"
#undef TP_CFG
  return 0;
}
