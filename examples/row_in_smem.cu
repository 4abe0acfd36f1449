// The row-in-shared-memory case: a naive decode-attention reference that keeps the query (Dl latent + Dr rope values)
// and one whole score row (kv_len values) in dynamic shared memory, (Dl + Dr + kv_len) * 4 bytes, plus a small static
// scratch for the block reductions. It works in tests and fails to launch at long prefixes on an SM120 GPU.
//
//   nvcc -O2 -I"$(tileprobe include)" -gencode arch=compute_120a,code=sm_120a -gencode arch=compute_121a,code=sm_121a \
//        -gencode arch=compute_90a,code=sm_90a -o row_in_smem examples/row_in_smem.cu
//   tileprobe inspect row_in_smem --kernel row_attention --dynamic '(Dl+Dr+kv_len)*4' --set Dl=512,Dr=64 --solve kv_len
//   ./row_in_smem 512 64 1024 60000    # on a GPU: each kv_len launched, or "n/a" with the bytes (tileprobe/guard.h)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <tileprobe/guard.h>

constexpr int kThreads = 256;

// out[d] = sum_j softmax_j(q . k_j) * v_j[d] for one query; k_j = [kl_j (Dl) | kr_j (Dr)], v_j = kl_j.
extern "C" __global__ void __launch_bounds__(kThreads)
row_attention(const float* q, const float* kl, const float* kr, float* out, int Dl, int Dr, int kv_len, float scale) {
  extern __shared__ float smem[];
  __shared__ float red[kThreads / 32];
  __shared__ float stat[2];
  float* ql = smem;
  float* qr = smem + Dl;
  float* row = qr + Dr;
  for (int i = threadIdx.x; i < Dl + Dr; i += blockDim.x) smem[i] = q[i];
  __syncthreads();
  float local_max = -1e30f;
  for (int j = threadIdx.x; j < kv_len; j += blockDim.x) {
    float s = 0.f;
    for (int d = 0; d < Dl; ++d) s += ql[d] * kl[(size_t)j * Dl + d];
    for (int d = 0; d < Dr; ++d) s += qr[d] * kr[(size_t)j * Dr + d];
    row[j] = s * scale;
    local_max = fmaxf(local_max, row[j]);
  }
  for (int o = 16; o > 0; o /= 2) local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = local_max;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = red[0];
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, red[w]);
    stat[0] = m;
  }
  __syncthreads();
  float local_sum = 0.f;
  for (int j = threadIdx.x; j < kv_len; j += blockDim.x) {
    row[j] = __expf(row[j] - stat[0]);
    local_sum += row[j];
  }
  for (int o = 16; o > 0; o /= 2) local_sum += __shfl_xor_sync(0xffffffffu, local_sum, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = local_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s += red[w];
    stat[1] = s;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < Dl; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < kv_len; ++j) acc += row[j] * kl[(size_t)j * Dl + d];
    out[d] = acc / stat[1];
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s Dl Dr kv_len [kv_len...]\n", argv[0]);
    return 2;
  }
  int Dl = atoi(argv[1]), Dr = atoi(argv[2]);
  for (int a = 3; a < argc; ++a) {
    int kv_len = atoi(argv[a]);
    size_t bytes = (size_t)(Dl + Dr + kv_len) * sizeof(float);
    tileprobe::SmemFit f = tileprobe::smem_fit(row_attention, bytes);
    char why[200];
    tileprobe::describe(f, why, sizeof why);
    if (!f.fits) {
      printf("kv_len=%d: n/a (%s)\n", kv_len, why);
      continue;
    }
    std::vector<float> hq(Dl + Dr), hkl((size_t)kv_len * Dl), hkr((size_t)kv_len * Dr);
    srand(1234 + kv_len);
    for (auto* v : {&hq, &hkl, &hkr})
      for (auto& x : *v) x = (float)rand() / RAND_MAX - 0.5f;
    float *q, *kl, *kr, *out;
    cudaMalloc(&q, hq.size() * 4);
    cudaMalloc(&kl, hkl.size() * 4);
    cudaMalloc(&kr, hkr.size() * 4 + 4);
    cudaMalloc(&out, Dl * 4);
    cudaMemcpy(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(kl, hkl.data(), hkl.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(kr, hkr.data(), hkr.size() * 4, cudaMemcpyHostToDevice);
    cudaError_t e = tileprobe::allow_dynamic_smem(row_attention, bytes);
    if (e == cudaSuccess) {
      row_attention<<<1, kThreads, bytes>>>(q, kl, kr, out, Dl, Dr, kv_len, 0.05f);
      e = cudaGetLastError();
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    printf("kv_len=%d: %s (%s)\n", kv_len, e == cudaSuccess ? "launched" : cudaGetErrorString(e), why);
    cudaFree(q);
    cudaFree(kl);
    cudaFree(kr);
    cudaFree(out);
  }
  return 0;
}
