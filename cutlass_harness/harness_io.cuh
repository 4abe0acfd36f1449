// tileprobe runtime harness: errors, JSON output, command-line options and the problems file.
// Protocol (every stdout line, option, env var and exit code): PROTOCOL.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cutlass/cutlass.h"

// ---- Errors and JSON ----
struct Failure {  // thrown on the first failing step; main turns it into launch_status "launch-error"
  std::string reason;
};

inline void ck(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
    throw Failure{what + ": " + cudaGetErrorString(e)};
  }
}

inline std::string jstr(const std::string& s) {
  std::string out = "\"";
  char buf[8];
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c < 0x20) std::snprintf(buf, sizeof(buf), "\\u%04x", c), out += buf;
    else out += char(c);
  }
  return out + "\"";
}

// A JSON number; infinities become +-1e30 and NaN becomes null, since JSON has neither.
inline std::string jnum(double v) {
  if (v != v) return "null";
  if (v > 1e30) v = 1e30;
  if (v < -1e30) v = -1e30;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

inline std::string jint(long long v) { return std::to_string(v); }

struct Json {
  std::string body;
  Json& add(const char* key, const std::string& raw) {
    body += (body.empty() ? "" : ", ") + jstr(key) + ": " + raw;
    return *this;
  }
  std::string str() const { return "{" + body + "}"; }
};

inline std::string jlist(const std::vector<double>& v) {
  std::string list;
  for (double u : v) list += (list.empty() ? "" : ", ") + jnum(u);
  return "[" + list + "]";
}

// Print one protocol line and flush it, so a later crash or kill loses nothing already printed.
inline void emit_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// CUTLASS status as its enumerator name (cutlassGetStatusString gives prose such as "Error Internal").
inline const char* status_name(cutlass::Status s) {
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
  double atol = 0.0, rtol = 2e-2;  // fallbacks only: the Python side passes the family's tolerances
  int warmup = 5, iters = 20, repeats = 5, rotate = 1, device = 0;
  int max_repeats = 0;  // > repeats: add repeats one at a time until the median is settled (median_tol), up to this
  double median_tol = 0.005;  // settled: one more repeat, whatever it measures, moves the median by <= this fraction
  int topk = 2;  // finalize (scatter) builds only: experts per token when building the MoE routing
  double target_ms = 0;  // > 0: choose launches per repeat to fill about this much GPU time
  bool check = true;
};

[[noreturn]] inline void usage(const std::string& msg) {
  std::fprintf(stderr, "error: %s\nusage: harness --problems FILE [--seed S] [--alpha A] [--beta B] [--atol A] [--rtol R] "
               "[--warmup W] [--iters I] [--target-ms T] [--repeats R] [--max-repeats M] [--median-tol F] [--rotate N] [--no-check] [--device D] "
               "[--topk K] [--reference-dump DIR] [--config-index I]\n", msg.c_str());
  std::exit(2);
}

inline Options parse_args(int argc, char** argv) {
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
      if (end == val.c_str() || *end || !(v >= lo) || !(v <= 1e30)) usage("bad value for " + key + ": " + val);
      return v;
    };
    if (key == "--problems") o.problems = val;
    else if (key == "--reference-dump") o.dump_dir = val;
    else if (key == "--seed") o.seed = uint64_t(num(0));
    else if (key == "--alpha") o.alpha = float(num(-1e30));
    else if (key == "--beta") o.beta = float(num(-1e30));
    else if (key == "--atol") o.atol = num(0);
    else if (key == "--rtol") o.rtol = num(0);
    else if (key == "--warmup") o.warmup = int(num(0));
    else if (key == "--iters") o.iters = int(num(1));
    else if (key == "--target-ms") o.target_ms = num(0);
    else if (key == "--repeats") o.repeats = int(num(0));
    else if (key == "--max-repeats") o.max_repeats = int(num(0));
    else if (key == "--median-tol") o.median_tol = num(0);
    else if (key == "--rotate") o.rotate = int(num(1));
    else if (key == "--device") o.device = int(num(0));
    else if (key == "--topk") o.topk = int(num(1));
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
  long long id;  // stable point ID: the third token of its 'point' line, else its ordinal in the file
};

// A whole token as a decimal integer in [lo, hi]; false when it is not one.
inline bool parse_int(const std::string& tok, long long lo, long long hi, long long& out) {
  if (tok.empty() || tok.size() > 19 || tok.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::strtoll(tok.c_str(), nullptr, 10);
  return out >= lo && out <= hi;
}

inline std::vector<PointSpec> read_points(const std::string& path, int default_rotate) {
  std::ifstream in(path);
  if (!in) usage("cannot open problems file " + path);
  std::vector<PointSpec> out;
  std::set<long long> ids;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<std::string> tok;
    for (std::string t; ss >> t;) tok.push_back(t);
    if (tok.empty()) continue;
    long long v[3];
    if (tok[0] == "point") {
      long long id = static_cast<long long>(out.size());
      if (tok.size() < 2 || tok.size() > 3 || !parse_int(tok[1], 1, INT32_MAX, v[0]) ||
          (tok.size() == 3 && !parse_int(tok[2], 0, INT64_MAX, id)))
        usage("bad 'point' line in " + path + ": '" + line + "' (want 'point R' or 'point R ID')");
      if (!ids.insert(id).second) usage("point ID " + std::to_string(id) + " appears twice in " + path);
      out.push_back({{}, int(v[0]), id});
    } else if (tok.size() == 3 && parse_int(tok[0], 1, INT32_MAX, v[0]) && parse_int(tok[1], 1, INT32_MAX, v[1]) &&
               parse_int(tok[2], 1, INT32_MAX, v[2])) {
      if (out.empty()) {
        out.push_back({{}, default_rotate, 0});
        ids.insert(0);
      }
      out.back().probs.push_back({int(v[0]), int(v[1]), int(v[2])});
    } else {
      usage("problems file " + path + " must hold lines of 'M N K' (positive) or 'point R [ID]'; got '" + line + "'");
    }
  }
  if (out.empty()) usage("problems file " + path + " holds no problem");
  for (auto& p : out)
    if (p.probs.empty()) usage("point " + std::to_string(p.id) + " in " + path + " holds no problem");
  return out;
}
