// libFuzzer target: the hardware file of `tula plan --hardware` (tula::parse_hardware_partitions,
// hardware.hpp), then the derived models and, for clusters small enough to plan quickly, the
// simulated plan. Every input must parse or be refused with a one-line tula::Error starting
// with "tula: "; a plan must have finite, non-negative predictions. Anything else is a bug.
// Built and run by `make fuzz`; seed corpus in tests/fuzz/corpus/hardware/.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tula/error.hpp"
#include "tula/hardware.hpp"

namespace {
void check_message(const tula::Error& e) {
    const std::string m = e.what();
    if (m.rfind("tula: ", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    tula::HardwareSpec h;
    try {
        h = tula::parse_hardware_partitions(text, "fuzz.json").front();
    } catch (const tula::Error& e) {
        check_message(e);
        return 0;
    }
    const tula::SimulatedModels m = tula::derive_models(h);
    if (!std::isfinite(m.compute.t0) || !std::isfinite(m.compute.t1) || m.compute.t1 < 0) std::abort();
    const size_t batches = h.global_batches.empty() ? tula::default_global_batches(h).size() : h.global_batches.size();
    if (static_cast<double>(h.nodes) * batches > 20000) return 0;  // keep each run fast
    try {
        tula::PolicySpec p;
        const tula::Plan plan = tula::plan_hardware(tula::Config{}, h, 0, 0, 0, p);
        for (const auto& c : plan.candidates)
            if (!(c.total_seconds >= 0) || !(c.cost >= 0) || c.nodes < 1 || c.local_batch < 1) std::abort();
        if (plan.chosen >= plan.candidates.size()) std::abort();
    } catch (const tula::Error& e) {
        check_message(e);
    }
    return 0;
}
