// Helpers of the db unit tests (test_libtula_db.cpp and test_libtula_db_exchange.cpp), written once.
#pragma once
#include <cppunit/extensions/HelperMacros.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>
#include "record_builders.hpp"
#include "test_util.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "record_builders.hpp"

namespace db_test {

using tula_test::error_of;
using tula_test::contains;

using tula_test::TempDir;  // tests/unit/test_util.hpp
using tula_test::raw_exec;
using tula_test::raw_query;

inline bool exists(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

inline tula::Workload make_workload(const std::string& model, int64_t params) {
    tula::Workload w = tula_test::fmnist_workload(model, params);
    w.activation_floats = params / 4 + 1;  // any positive size, different per workload
    return w;
}

inline void assert_same(const tula::Workload& a, const tula::Workload& b) {
    using W = tula::Workload;
    tula_test::assert_fields_equal(a, b, &W::name, &W::model, &W::dataset, &W::params, &W::train_examples,
                                   &W::test_examples, &W::activation_floats);
}


// Every row of `sql` on `path`, read with sqlite3 directly (independent of libtula's readers),
// each row as its columns joined by '|' (numbers with 17 significant digits, NULL as "null").
inline std::vector<std::string> raw_rows(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
        throw std::runtime_error("cannot open " + path);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
        sqlite3_close(db);
        throw std::runtime_error("cannot prepare " + sql);
    }
    std::vector<std::string> out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        std::string row;
        for (int c = 0; c < sqlite3_column_count(st); ++c) {
            char buf[64];
            switch (sqlite3_column_type(st, c)) {
                case SQLITE_NULL: row += "null"; break;
                case SQLITE_INTEGER: row += std::to_string(sqlite3_column_int64(st, c)); break;
                case SQLITE_FLOAT:
                    std::snprintf(buf, sizeof buf, "%.17g", sqlite3_column_double(st, c));
                    row += buf;
                    break;
                default: row += reinterpret_cast<const char*>(sqlite3_column_text(st, c));
            }
            row += "|";
        }
        out.push_back(row);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

// The rows that an export carries, in a comparable form (ids and the workload's `updated` left out).
inline std::vector<std::string> all_rows(const std::string& path) {
    std::vector<std::string> out;
    for (const char* sql :
         {"SELECT name, model, dataset, params, train_examples, test_examples FROM workload ORDER BY name",
          "SELECT workload, host, local_batch, threads, seconds_per_iter, iters, created, ranks, synced_seconds_per_iter, "
          "hardware_class, ranks_per_node, job_id FROM compute_profile ORDER BY id",
          "SELECT host, nodes, bytes, seconds, created, hardware_class, ranks_per_node FROM allreduce_profile ORDER BY id",
          "SELECT job_id, workload, nodes, global_batch, epochs, predicted_seconds, measured_seconds, test_accuracy, "
          "created, noise_scale, noise_observations, hardware_class, ranks_per_node, parts, part_seconds FROM run ORDER BY id",
          "SELECT r.job_id, e.epoch, e.seconds, e.train_loss, e.test_accuracy FROM run_epoch e JOIN run r ON "
          "r.id = e.run_id ORDER BY r.id, e.epoch"}) {
        out.push_back(std::string("--") + sql);
        for (auto& r : raw_rows(path, sql)) out.push_back(r);
    }
    return out;
}

// A database with two workloads, random compute/allreduce samples and two runs (one with
// per-epoch loss and accuracy, one without), all with distinct non-round values.
inline void fill_random(tula::ProfileDb& db, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.001, 0.5);
    for (const char* m : {"lenet5", "fmnist-cnn"}) {
        tula::Workload w;
        w.model = m;
        w.dataset = "fashion-mnist";
        w.name = w.model + "@" + w.dataset;
        w.params = 1000 + static_cast<int64_t>(rng() % 100000);
        w.train_examples = 60000;
        w.test_examples = 10000;
        db.upsert_workload(w);
        for (int b : {16, 32, 64, 128}) {
            tula::ComputeSample c;
            c.workload = w.name;
            c.host = "node" + std::to_string(rng() % 9);
            c.local_batch = b;
            c.threads = 1 + static_cast<int>(rng() % 4);
            c.seconds_per_iter = u(rng) / 3.0;
            c.iters = 5 + static_cast<int>(rng() % 20);
            c.ranks = 1 + static_cast<int>(rng() % 3);
            if (c.ranks > 1) c.synced_seconds_per_iter = 1.25 * c.seconds_per_iter;  // no extra draw
            c.hardware_class = b < 64 ? "a100" : "";  // a class and the unknown one
            c.ranks_per_node = c.ranks == 2 ? 2 : 1;   // 2 ranks sharing a node, or one per node
            c.job_id = b == 32 ? "4" + std::to_string(b) : "";  // measured by a job, or not known
            db.add_compute(c);
        }
        tula::RunRecord r = tula_test::run_record(std::to_string(100 + rng() % 900), w.name, 2, 256, 3, 100 * u(rng), 1.7e9 + 1000 * u(rng));
        r.predicted_seconds = 100 * u(rng);
        r.test_accuracy = u(rng);
        if (w.model == "lenet5") {  // a measured noise scale (no extra draws: the other values stay as they were)
            r.noise_scale = 100.0 + 1000.0 * r.test_accuracy;
            r.noise_observations = 37;
            r.train_examples = 6000;  // a --limit-train run
            r.optimizer = "lamb";
            r.hardware_class = "h100";
            r.ranks_per_node = 4;
        }
        for (int e = 0; e < 3; ++e) {
            r.epoch_seconds.push_back(10 * u(rng));
            if (w.model == "lenet5") {
                r.epoch_train_loss.push_back(u(rng));
                r.epoch_test_accuracy.push_back(u(rng));
            }
        }
        db.add_run(r);
    }
    for (int n : {2, 4}) {
        tula::AllreduceSample a;
        a.host = "node0";
        a.nodes = n;
        a.bytes = 4096 + static_cast<int64_t>(rng() % 100000);
        a.seconds = u(rng) / 100;
        a.hardware_class = n == 2 ? "h100" : "";
        db.add_allreduce(a);
    }
}

}  // namespace db_test
