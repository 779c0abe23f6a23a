// A synthetic hardware file for the tests of simulation mode (test_libtula_hardware.cpp,
// test_libtula_buckets.cpp).
#pragma once

#include <nlohmann/json.hpp>

namespace tula_test {

// A synthetic cluster: 256 nodes x 4 devices of 100 TFLOP/s, 40 GB, given network figures.
inline nlohmann::json cluster(double bandwidth, double latency) {
    return nlohmann::json{{"name", "synthetic"},
                         {"nodes", 256},
                         {"gpus_per_node", 4},
                         {"price_per_node_hour", 10.0},
                         {"device", {{"peak_flops", 100e12}, {"efficiency", 0.5}, {"memory_bytes", 40e9}}},
                         {"network", {{"bandwidth", bandwidth}, {"latency", latency}, {"allreduce", "ring"}}},
                         {"workload",
                          {{"name", "net@data"},
                           {"flops_per_example", 1e10},
                           {"parameter_bytes", 1e8},
                           {"train_examples", 1000000},
                           {"activation_bytes_per_example", 5e7},
                           {"epochs", 10}}},
                         {"global_batches", {256, 512, 1024, 2048, 4096, 8192, 16384, 32768}}};
}

}  // namespace tula_test
