// libtula: the stop-before-the-time-limit rule (tula/stop.hpp).
#include "tula/stop.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

namespace tula {
namespace {

double non_negative(double x) { return std::isfinite(x) && x > 0 ? x : 0.0; }

}  // namespace

int slurm_time_limit_minutes(double seconds, double margin, double overhead) {
    const double m = std::ceil((seconds * (1.0 + margin) + overhead) / 60.0);
    if (!(m >= 1)) return 1;  // also NaN
    if (m > INT_MAX / 2) return INT_MAX / 2;
    return static_cast<int>(m);
}

double slower_than_planned(double measured_step_seconds, double predicted_step_seconds) {
    if (!(non_negative(measured_step_seconds) > 0) || !(non_negative(predicted_step_seconds) > 0)) return 0;
    const double r = measured_step_seconds / predicted_step_seconds;
    return r > kSlowerThanPlanned ? r : 0;
}

int next_part_time_limit(double steps_left, double step_seconds, double startup_seconds, double margin,
                         double overhead, int signal_seconds) {
    const double run = non_negative(steps_left) * non_negative(step_seconds) + non_negative(startup_seconds);
    return slurm_time_limit_minutes(run, non_negative(margin),
                              non_negative(overhead) + std::max(signal_seconds, 0) + kSlurmSignalResolution);
}

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

HoleStart hole_time_to_result(double hole_wait_seconds, double hole_seconds, double full_wait_seconds,
                              double total_seconds, double startup_seconds, int signal_seconds,
                              double part_seconds) {
    HoleStart h;
    const double total = non_negative(total_seconds);
    const double u = std::min(non_negative(startup_seconds), total);
    const double full_wait = non_negative(full_wait_seconds);
    h.wait_seconds = non_negative(hole_wait_seconds);
    h.seconds = non_negative(hole_seconds);
    h.full_seconds = full_wait + total;
    h.part_seconds = non_negative(part_seconds) > 0 ? non_negative(part_seconds) : h.seconds;
    const double L = h.part_seconds;
    const double c = L - u - std::max(signal_seconds, 0) - kSlurmSignalResolution;  // training a part
    if (!(c > 0) || h.seconds < L) return h;
    double left = total - u, t = h.wait_seconds;
    const double hole_end = h.wait_seconds + h.seconds;
    while (left > 0 && t + L <= hole_end + 1e-6) {  // the parts that fit in the hole
        const double train = std::min(c, left);
        left -= train;
        h.train_seconds += train;
        ++h.hole_parts;
        t += left > 0 ? L + kRequeueDelaySeconds : u + train;
    }
    if (left <= 0) {
        h.time_to_result = t;
    } else {  // the rest: from the full-limit start, parts back to back
        const double k = std::ceil(left / c - 1e-9);
        h.rest_parts = static_cast<int>(std::min(k, 1e9));
        h.rest_wait_seconds = std::max(t, full_wait);
        h.rest_train_seconds = (k - 1) * (L + kRequeueDelaySeconds) + u + (left - (k - 1) * c);
        h.time_to_result = h.rest_wait_seconds + h.rest_train_seconds;
    }
    h.used = h.hole_parts > 0 && h.time_to_result < h.full_seconds;
    return h;
}

}  // namespace tula
