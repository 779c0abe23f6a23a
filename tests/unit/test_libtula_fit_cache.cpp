// Unit tests of the cache of the runs' fits (FitCache, fit_cache.hpp): a step model read back
// from the cache predicts bit for bit what StepFit::fit predicts, an overlap exponent is
// OverlapModel::fit's; the same evidence is fitted once, new evidence is fitted again; a file
// that is not the cache's own is refitted.
#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tula/predict.hpp"
#include "tula/error.hpp"
#include "tula/fit_cache.hpp"
#include "tula/validate.hpp"
#include "models_fixtures.hpp"
#include "record_builders.hpp"
#include "test_util.hpp"

namespace {

// Runs at 1 and 2 nodes, 1 and 2 ranks per node, local batches 16, 32 and 64, the compute part
// missed by 20 % to 60 % and the exchange by a part of u: enough placements for both forms.
std::vector<tula::StepObservation> observations() {
    std::vector<tula::StepObservation> obs;
    int i = 0;
    for (int K : {1, 2})
        for (int R : {1, 2})
            for (int b : {16, 32, 64})
                for (int rep = 0; rep < 2; ++rep, ++i) {
                    tula::StepObservation o;
                    o.nodes = K;
                    o.ranks_per_node = R;
                    o.local_batch = b;
                    o.compute_seconds = 1e-3 + 1e-4 * b;
                    o.model_seconds = o.compute_seconds + (K > 1 ? 2e-3 : 0.0);
                    o.measured_seconds = o.model_seconds + o.compute_seconds * (0.2 + 0.05 * (i % 9)) +
                                         (K > 1 ? 1e-3 * R : 0.0);
                    obs.push_back(o);
                }
    return obs;
}

// Every prediction of `a` and `b` on a grid of placements, each with its sd, compared bit for bit.
void assert_same_predictions(const tula::StepFit& a, const tula::StepFit& b) {
    for (int K : {1, 2, 3, 8})
        for (int R : {1, 2, 4})
            for (double lb : {16.0, 24.0, 64.0}) {
                const double c = 1e-3 + 1e-4 * lb, m = c + 2e-3;
                const tula::StepFit::Prediction p = a.predict(K, R, lb, m, c), q = b.predict(K, R, lb, m, c);
                const std::string at = std::to_string(K) + "x" + std::to_string(R) + " b=" + std::to_string(lb);
                CPPUNIT_ASSERT_EQUAL_MESSAGE(at, p.seconds, q.seconds);
                CPPUNIT_ASSERT_EQUAL_MESSAGE(at, p.sd, q.sd);
                CPPUNIT_ASSERT_EQUAL_MESSAGE(at, p.compute_correction, q.compute_correction);
            }
}

std::string file_of(const std::string& dir, const std::vector<tula::StepObservation>& obs) {
    return dir + "/fits/" + tula::FitCache::key(obs) + ".json";
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
}

}  // namespace

class LibtulaFitCacheTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaFitCacheTest);
    CPPUNIT_TEST(test_json_round_trip_is_exact);
    CPPUNIT_TEST(test_same_evidence_is_fitted_once);
    CPPUNIT_TEST(test_foreign_files_are_refitted);
    CPPUNIT_TEST(test_malformed_json_is_refused);
    CPPUNIT_TEST(test_overlap_and_its_failure_are_kept);
    CPPUNIT_TEST(test_default_dir);
    CPPUNIT_TEST(test_run_checks_through_the_cache);
    CPPUNIT_TEST_SUITE_END();

public:
    // Both forms, written and read back: every member, and so every prediction and sd, is the
    // same to the last bit (the covariance is kept as its upper triangle).
    void test_json_round_trip_is_exact() {
        std::vector<tula::StepObservation> obs = observations();
        const tula::StepFit per_batch = tula::StepFit::fit(obs);
        CPPUNIT_ASSERT_EQUAL(std::string("per-batch"), std::string(per_batch.form()));
        obs.resize(2);  // one placement: the per-ranks form, left-out errors NaN
        const tula::StepFit per_ranks = tula::StepFit::fit(obs);
        CPPUNIT_ASSERT_EQUAL(std::string("per-ranks"), std::string(per_ranks.form()));
        for (const tula::StepFit* f : {&per_batch, &per_ranks}) {
            const std::optional<tula::StepFit> g = tula::step_fit_from_json(tula::step_fit_to_json(*f));
            CPPUNIT_ASSERT(g);
            CPPUNIT_ASSERT(g->covariance == f->covariance);
            CPPUNIT_ASSERT(g->per_batch == f->per_batch && g->per_ranks == f->per_ranks);
            CPPUNIT_ASSERT_EQUAL(f->runs, g->runs);
            CPPUNIT_ASSERT_EQUAL(std::isnan(f->left_out_error), std::isnan(g->left_out_error));
            assert_same_predictions(*f, *g);
        }
    }

    // The same observations: fitted once, then from memory, then (a new process's cache on the
    // same directory) from the file, each the fit of StepFit::fit; one more run: fitted again.
    void test_same_evidence_is_fitted_once() {
        tula_test::TempDir dir("fit-cache");
        std::vector<tula::StepObservation> obs = observations();
        const tula::StepFit fresh = tula::StepFit::fit(obs);
        tula::FitCache cache(dir.path);
        assert_same_predictions(fresh, cache.step_fit(obs));
        assert_same_predictions(fresh, cache.step_fit(obs));
        CPPUNIT_ASSERT_EQUAL(1, cache.stats().misses);
        CPPUNIT_ASSERT_EQUAL(1, cache.stats().memory_hits);
        struct stat st;
        CPPUNIT_ASSERT(::stat(file_of(dir.path, obs).c_str(), &st) == 0);
        CPPUNIT_ASSERT_EQUAL(0600, static_cast<int>(st.st_mode & 07777));
        tula::FitCache next(dir.path);
        assert_same_predictions(fresh, next.step_fit(obs));
        CPPUNIT_ASSERT_EQUAL(1, next.stats().file_hits);
        CPPUNIT_ASSERT_EQUAL(0, next.stats().misses);
        obs.push_back(obs.front());
        obs.back().measured_seconds *= 1.5;
        assert_same_predictions(tula::StepFit::fit(obs), next.step_fit(obs));
        CPPUNIT_ASSERT_EQUAL(1, next.stats().misses);
    }

    // A file at the key's path that is not a fit, is writable by others or is a link is not
    // read: the evidence is fitted again and the fit is StepFit::fit's.
    void test_foreign_files_are_refitted() {
        tula_test::TempDir dir("fit-cache");
        const std::vector<tula::StepObservation> obs = observations();
        const tula::StepFit fresh = tula::StepFit::fit(obs);
        tula::FitCache{dir.path}.step_fit(obs);  // makes the folder and the file
        const std::string path = file_of(dir.path, obs);
        tula::StepFit wrong = fresh;
        wrong.theta0 += 1.0;
        const std::string forged = tula::step_fit_to_json(wrong);
        {  // not JSON
            write_text(path, "{ not json");
            tula::FitCache c(dir.path);
            assert_same_predictions(fresh, c.step_fit(obs));
            CPPUNIT_ASSERT_EQUAL(1, c.stats().misses);
        }
        {  // a fit, but group-writable
            write_text(path, forged);
            CPPUNIT_ASSERT_EQUAL(0, ::chmod(path.c_str(), 0620));
            tula::FitCache c(dir.path);
            assert_same_predictions(fresh, c.step_fit(obs));
            CPPUNIT_ASSERT_EQUAL(1, c.stats().misses);
        }
        {  // a link to a fit
            const std::string target = dir.path + "/forged.json";
            write_text(target, forged);
            CPPUNIT_ASSERT_EQUAL(0, ::chmod(target.c_str(), 0600));
            ::unlink(path.c_str());
            CPPUNIT_ASSERT_EQUAL(0, ::symlink(target.c_str(), path.c_str()));
            tula::FitCache c(dir.path);
            assert_same_predictions(fresh, c.step_fit(obs));
            CPPUNIT_ASSERT_EQUAL(1, c.stats().misses);
        }
        {  // a directory that cannot be made: memory only, the fit all the same
            tula::FitCache c(dir.path + "/forged.json/below");
            assert_same_predictions(fresh, c.step_fit(obs));
            CPPUNIT_ASSERT_EQUAL(1, c.stats().write_errors);
        }
    }

    // Texts that are not a fit: nullopt, never a throw.
    void test_malformed_json_is_refused() {
        const tula::StepFit f = tula::StepFit::fit(observations());
        const std::string good = tula::step_fit_to_json(f);
        CPPUNIT_ASSERT(tula::step_fit_from_json(good));
        for (const std::string& bad :
             {std::string(""), std::string("[]"), std::string("{\"runs\": 3}"), std::string("1e99999"),
              good.substr(0, good.size() / 2)})
            CPPUNIT_ASSERT_MESSAGE(bad, !tula::step_fit_from_json(bad));
        // a covariance of the wrong size, a non-finite coefficient
        std::string shorter = good;
        const size_t at = shorter.find("\"covariance_upper\":[") + 20;
        shorter.erase(at, shorter.find(',', at) + 1 - at);
        CPPUNIT_ASSERT(!tula::step_fit_from_json(shorter));
        tula::StepFit nan = f;
        nan.theta0 = std::nan("");
        CPPUNIT_ASSERT(!tula::step_fit_from_json(tula::step_fit_to_json(nan)));
    }

    // Samples made by gamma = 3: the cached exponent is OverlapModel::fit's, from memory and
    // from the file; samples the fit refuses throw its message each time; a forged file with a
    // gamma below 1 is refitted.
    void test_overlap_and_its_failure_are_kept() {
        tula_test::TempDir dir("fit-cache");
        std::vector<tula::IterationSample> samples;
        for (int i = 0; i < 12; ++i) {
            tula::IterationSample q;
            q.compute_seconds = 1e-3 * (1 + i % 4);
            q.comm_seconds = 5e-4 * (1 + i % 3);
            q.measured_seconds = std::pow(std::pow(q.compute_seconds, 3) + std::pow(q.comm_seconds, 3), 1.0 / 3);
            q.nodes = 2;
            samples.push_back(q);
        }
        const tula::OverlapModel fresh = tula::OverlapModel::fit(samples);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3.0, fresh.gamma, 1e-3);
        tula::FitCache cache(dir.path);
        CPPUNIT_ASSERT_EQUAL(fresh.gamma, cache.overlap(samples).gamma);
        CPPUNIT_ASSERT_EQUAL(fresh.gamma, cache.overlap(samples).gamma);
        tula::FitCache next(dir.path);
        const tula::OverlapModel read = next.overlap(samples);
        CPPUNIT_ASSERT_EQUAL(fresh.gamma, read.gamma);
        CPPUNIT_ASSERT_EQUAL(fresh.samples, read.samples);
        CPPUNIT_ASSERT_EQUAL(fresh.rmse_rel, read.rmse_rel);
        CPPUNIT_ASSERT_EQUAL(1, cache.stats().misses);
        CPPUNIT_ASSERT_EQUAL(1, cache.stats().memory_hits);
        CPPUNIT_ASSERT_EQUAL(1, next.stats().file_hits);

        const std::string path = dir.path + "/fits/" + tula::FitCache::key(samples) + ".json";
        write_text(path, "{\"gamma\": 0.5, \"samples\": 12, \"rmse_rel\": 0}");
        tula::FitCache forged(dir.path);
        CPPUNIT_ASSERT_EQUAL(fresh.gamma, forged.overlap(samples).gamma);
        CPPUNIT_ASSERT_EQUAL(1, forged.stats().misses);

        std::vector<tula::IterationSample> bad = samples;
        bad[3].measured_seconds = -1;
        std::string message;
        try {
            tula::OverlapModel::fit(bad);
        } catch (const tula::Error& e) {
            message = e.what();
        }
        CPPUNIT_ASSERT(!message.empty());
        for (tula::FitCache* c : {&cache, &cache}) {
            try {
                c->overlap(bad);
                CPPUNIT_FAIL("the failed fit did not throw");
            } catch (const tula::Error& e) {
                CPPUNIT_ASSERT_EQUAL(message, std::string(e.what()));
            }
        }
        tula::FitCache again(dir.path);
        CPPUNIT_ASSERT_THROW(again.overlap(bad), tula::Error);
        CPPUNIT_ASSERT_EQUAL(1, again.stats().file_hits);
    }

    void test_default_dir() {
        using C = tula::FitCache;
        CPPUNIT_ASSERT_EQUAL(std::string("/c"), C::default_dir("/c", "/x", "/h", nullptr));
        CPPUNIT_ASSERT_EQUAL(std::string("/x/tula"), C::default_dir("", "/x", "/h", "1"));
        CPPUNIT_ASSERT_EQUAL(std::string("/h/.cache/tula"), C::default_dir(nullptr, "relative", "/h", nullptr));
        CPPUNIT_ASSERT_EQUAL(std::string(""), C::default_dir(nullptr, nullptr, nullptr, nullptr));
        for (const char* off : {"0", "no", "off"}) CPPUNIT_ASSERT_EQUAL(std::string(""), C::default_dir("/c", "/x", "/h", off));
    }

    // The planner's run checks refit the models once per checked run: through the cache, a
    // second check of the same runs fits nothing and says the same.
    void test_run_checks_through_the_cache() {
        std::vector<tula::ComputeSample> c;
        for (int b : {8, 16, 32, 64, 128}) c.push_back(models_test::cs(b, 1e-3 + 1e-4 * b));
        tula::TimeModels m = tula::fit_profile_models(tula::Config{}, models_test::wl(), c,
                                                      models_test::ring_samples(1e-4, 1e-6), tula::Corrections{}, nullptr);
        std::vector<tula::RunRecord> runs;
        for (int i = 0; i < 6; ++i) {
            const int K = 1 + i % 2, B = K * 32;
            runs.push_back(tula_test::run_record(std::to_string(i), "w@d", K, B, 2,
                                                 2 * std::floor(6000.0 / B) * (4e-3 + 1e-3 * i), 100 + i));
        }
        const std::vector<tula::RunCheck> plain = tula::check_runs(m, runs, 4, 0.95);
        tula::FitCache cache;
        m.fit_cache = &cache;
        const std::vector<tula::RunCheck> first = tula::check_runs(m, runs, 4, 0.95);
        const int misses = cache.stats().misses;
        CPPUNIT_ASSERT(misses >= 1);
        const std::vector<tula::RunCheck> second = tula::check_runs(m, runs, 4, 0.95);
        CPPUNIT_ASSERT_EQUAL(misses, cache.stats().misses);
        CPPUNIT_ASSERT_EQUAL(plain.size(), second.size());
        for (size_t i = 0; i < plain.size(); ++i) {
            CPPUNIT_ASSERT_EQUAL(plain[i].predicted_seconds, first[i].predicted_seconds);
            CPPUNIT_ASSERT_EQUAL(plain[i].predicted_seconds, second[i].predicted_seconds);
            CPPUNIT_ASSERT_EQUAL(plain[i].upper_seconds, second[i].upper_seconds);
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaFitCacheTest);
