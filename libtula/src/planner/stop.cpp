// libtula: the stop-before-the-time-limit rule (tula/stop.hpp).
#include "tula/stop.hpp"

#include <algorithm>
#include <cmath>

namespace tula {
namespace {

double non_negative(double x) { return std::isfinite(x) && x > 0 ? x : 0.0; }

}  // namespace

double checkpoint_bytes(int64_t params) { return 12.0 * static_cast<double>(std::max<int64_t>(params, 0)); }

double checkpoint_write_seconds(double bytes) { return non_negative(bytes) / kCheckpointWriteBandwidth; }

double stop_reserve_seconds(double step_seconds, double checkpoint_seconds) {
    return kStopMarginSeconds + 2.0 * non_negative(step_seconds) + non_negative(checkpoint_seconds);
}

int signal_seconds(double step_seconds, double checkpoint_seconds) {
    const double s = std::ceil(stop_reserve_seconds(step_seconds, checkpoint_seconds));
    return static_cast<int>(std::min(65535.0, std::max(1.0, s)));
}

int time_min_minutes(double startup_seconds, double epoch_seconds, int signal_seconds, int time_limit_minutes) {
    const double s = non_negative(startup_seconds) + non_negative(epoch_seconds) + std::max(signal_seconds, 0) +
                     kSlurmSignalResolution;
    double m = std::max(1.0, std::ceil(s / 60.0));
    if (time_limit_minutes > 0) {
        m = std::max(m, std::ceil(time_limit_minutes * kTimeMinShareOfLimit));
        m = std::min(m, static_cast<double>(time_limit_minutes));
    }
    return static_cast<int>(std::min(m, 5256000.0));
}

}  // namespace tula
