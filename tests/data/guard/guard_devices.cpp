// Drives tileprobe/guard.h against the stub runtime: argv = current count dynamic [static optin]*count, then asks
// about every device and prints one JSON object per device with what the guard answered and the state after.
#include <cstdio>
#include <cstdlib>

#include <tileprobe/guard.h>

void kernel(int*) {}

int main(int argc, char** argv) {
  stub::current = atoi(argv[1]);
  stub::count = atoi(argv[2]);
  size_t dynamic = strtoull(argv[3], nullptr, 10);
  for (int d = 0; d < stub::count; ++d) {
    stub::static_bytes[d] = strtoull(argv[4 + 2 * d], nullptr, 10);
    stub::optin[d] = atoi(argv[5 + 2 * d]);
    stub::max_dynamic_set[d] = -1;
  }
  int start = stub::current;
  for (int d = -1; d < stub::count + 1; ++d) {  // -1: the current device; count: no such device
    tileprobe::SmemFit f = tileprobe::smem_fit(kernel, dynamic, d);
    int after_fit = stub::current;
    cudaError_t set = tileprobe::allow_dynamic_smem(kernel, dynamic, d);
    int where = -2;
    for (int e = 0; e < stub::count; ++e)
      if (stub::max_dynamic_set[e] == static_cast<int>(dynamic)) where = e;
    printf("{\"asked\": %d, \"device\": %d, \"error\": %d, \"fits\": %s, \"static\": %zu, \"optin\": %zu, "
           "\"max_dynamic\": %zu, \"current_after_fit\": %d, \"set_error\": %d, \"set_on\": %d, "
           "\"current_after_set\": %d, \"start\": %d}\n",
           d, f.device, static_cast<int>(f.error), f.fits ? "true" : "false", f.static_bytes, f.optin_bytes,
           f.max_dynamic_bytes, after_fit, static_cast<int>(set), where, stub::current, start);
    for (int e = 0; e < stub::count; ++e) stub::max_dynamic_set[e] = -1;
  }
  return 0;
}
