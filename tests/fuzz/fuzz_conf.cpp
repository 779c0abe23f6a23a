// libFuzzer target: the tula.conf parser (tula::parse_config, conf.hpp). Every input must
// either parse into a Config whose values are in the ranges tula.conf(5) documents, or be
// refused with a tula::Error whose message starts with "tula: " and is one line. Anything
// else (a crash, a sanitizer report, another exception type, a multi-line message) is a bug.
// Built and run by `make fuzz` (clang++ -fsanitize=fuzzer,address); seed corpus in
// tests/fuzz/corpus/conf/.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tula/conf.hpp"
#include "tula/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const tula::Config c = tula::parse_config(text);
        if (c.max_nodes < 1 || c.global_batches.empty() || !std::isfinite(c.price_per_node_hour) ||
            c.price_per_node_hour < 0 || !std::isfinite(c.time_margin) || !std::isfinite(c.time_overhead) ||
            c.default_epochs < 1 || !std::isfinite(c.device_memory_bytes) || c.device_memory_bytes < 0 ||
            !(c.noise_scale > 0) || !std::isfinite(c.noise_scale))
            std::abort();  // accepted a value out of its documented range
        for (int b : c.global_batches)
            if (b < 1) std::abort();
    } catch (const tula::Error& e) {
        const std::string m = e.what();
        if (m.rfind("tula: ", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
    }
    return 0;
}
