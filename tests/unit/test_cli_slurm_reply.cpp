// Unit tests of the line protocol between the tula CLI and its slurmctld query child
// (cli/slurm_query.hpp): what is encoded decodes to the same values, field separators inside
// names cannot forge records, malformed and out-of-range lines are skipped, a failure line
// marks the whole reply failed, the AllowGroups check against a naive membership test, and the
// search for a backfill hole (find_hole) over a fake slurmctld against the brute-force answer.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cli/slurm_query.hpp"

namespace {

using namespace tula::cli;

class SlurmReplyTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SlurmReplyTest);
    CPPUNIT_TEST(test_partitions_round_trip);
    CPPUNIT_TEST(test_starts_round_trip);
    CPPUNIT_TEST(test_separators_in_text_cannot_forge_records);
    CPPUNIT_TEST(test_malformed_lines_are_skipped);
    CPPUNIT_TEST(test_failure_line);
    CPPUNIT_TEST(test_reply_cut_short);
    CPPUNIT_TEST(test_groups_allowed_against_naive);
    CPPUNIT_TEST(test_hole_round_trip);
    CPPUNIT_TEST(test_find_hole_against_brute_force);
    CPPUNIT_TEST(test_find_hole_no_hole);
    CPPUNIT_TEST(test_wait_after_reservations_against_naive);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_partitions_round_trip() {
        std::mt19937 rng(7);
        std::vector<SlurmPartition> in;
        for (int i = 0; i < 50; ++i) {
            SlurmPartition p;
            p.name = "p" + std::to_string(i);
            p.total_nodes = static_cast<int>(rng() % 5000);
            p.up_nodes = static_cast<int>(rng() % (p.total_nodes + 1));
            p.max_nodes = static_cast<int>(rng() % 100);
            p.max_time_minutes = static_cast<int>(rng() % 100000);
            p.usable = rng() % 2;
            p.is_default = rng() % 2;
            p.why_not = p.usable ? "" : "State=DOWN " + std::to_string(i);
            in.push_back(p);
        }
        std::string text;
        for (const auto& p : in) text += encode_partition(p);
        SlurmSite site;
        CPPUNIT_ASSERT(decode_reply(text, &site, nullptr));
        CPPUNIT_ASSERT(site.answered);
        CPPUNIT_ASSERT_EQUAL(in.size(), site.partitions.size());
        for (size_t i = 0; i < in.size(); ++i) {
            CPPUNIT_ASSERT_EQUAL(in[i].name, site.partitions[i].name);
            CPPUNIT_ASSERT_EQUAL(in[i].total_nodes, site.partitions[i].total_nodes);
            CPPUNIT_ASSERT_EQUAL(in[i].up_nodes, site.partitions[i].up_nodes);
            CPPUNIT_ASSERT_EQUAL(in[i].max_nodes, site.partitions[i].max_nodes);
            CPPUNIT_ASSERT_EQUAL(in[i].max_time_minutes, site.partitions[i].max_time_minutes);
            CPPUNIT_ASSERT_EQUAL(in[i].usable, site.partitions[i].usable);
            CPPUNIT_ASSERT_EQUAL(in[i].is_default, site.partitions[i].is_default);
            CPPUNIT_ASSERT_EQUAL(in[i].why_not, site.partitions[i].why_not);
        }
    }

    void test_starts_round_trip() {
        std::vector<StartEstimate> in(6);
        in[0].answered = true, in[0].wait_seconds = 0;
        in[1].answered = true, in[1].wait_seconds = 1500;
        in[2].error = "Requested node configuration is not available";
        in[3].answered = true, in[3].wait_seconds = 86400 * 3;
        in[4].error = "Invalid partition name specified";
        in[5].answered = true, in[5].wait_seconds = -5;  // a start in the past is a start now
        std::string text;
        for (size_t i = in.size(); i-- > 0;) text += encode_start(i, in[i]);  // any order
        std::vector<StartEstimate> out(in.size());
        for (auto& s : out) s.error = "unanswered";
        CPPUNIT_ASSERT(decode_reply(text, nullptr, &out));
        for (size_t i = 0; i < in.size(); ++i) {
            CPPUNIT_ASSERT_EQUAL(in[i].answered, out[i].answered);
            if (in[i].answered) {
                CPPUNIT_ASSERT_EQUAL(std::max(0.0, in[i].wait_seconds), out[i].wait_seconds);
                CPPUNIT_ASSERT(out[i].error.empty());
            } else {
                CPPUNIT_ASSERT_EQUAL(in[i].error, out[i].error);
            }
        }
    }

    void test_separators_in_text_cannot_forge_records() {
        SlurmPartition p;
        p.name = "gpu\tP\tforged\t1\t1\t1\t1\t1\t\nP";
        p.usable = false;
        p.why_not = "AllowGroups=a\nX\tforged failure";
        SlurmSite site;
        CPPUNIT_ASSERT(decode_reply(encode_partition(p), &site, nullptr));
        CPPUNIT_ASSERT_EQUAL(size_t(1), site.partitions.size());
        CPPUNIT_ASSERT_EQUAL(std::string("gpu P forged 1 1 1 1 1  P"), site.partitions[0].name);
        CPPUNIT_ASSERT_EQUAL(std::string("AllowGroups=a X forged failure"), site.partitions[0].why_not);
    }

    void test_malformed_lines_are_skipped() {
        const std::string text =
            "P\tcpu\t4\t4\t0\t0\t1\t0\t\n"      // good
            "P\tbad\t4\t-1\t0\t0\t1\t0\t\n"     // negative count
            "P\tbad\t4\t4\t0\t0\t2\t0\t\n"      // usable not 0/1
            "P\tbad\t4\t4\t0\t0\t1\t7\t\n"      // default not 0/1
            "P\t\t4\t4\t0\t0\t1\t0\t\n"         // no name
            "P\tshort\t4\t4\n"               // too few fields
            "S\t9\t10\n"                     // index out of range
            "S\t0\tsoon\n"                   // not a number
            "S\t1\t60\n"                     // good
            "garbage\n";
        SlurmSite site;
        std::vector<StartEstimate> starts(2);
        CPPUNIT_ASSERT(decode_reply(text, &site, &starts));
        CPPUNIT_ASSERT_EQUAL(size_t(1), site.partitions.size());
        CPPUNIT_ASSERT_EQUAL(std::string("cpu"), site.partitions[0].name);
        CPPUNIT_ASSERT(!starts[0].answered);
        CPPUNIT_ASSERT(starts[1].answered);
        CPPUNIT_ASSERT_EQUAL(60.0, starts[1].wait_seconds);
    }

    void test_failure_line() {
        SlurmSite site;
        CPPUNIT_ASSERT(!decode_reply(encode_failure("slurm_load_partitions: Unable to contact slurm controller"), &site,
                                     nullptr));
        CPPUNIT_ASSERT(!site.answered);
        CPPUNIT_ASSERT_EQUAL(std::string("slurm_load_partitions: Unable to contact slurm controller"), site.error);
    }

    // A child that dies (a Slurm plugin it cannot load, a crash) leaves a reply without the end
    // line, even one that decodes to partitions; one that finished ends with it.
    void test_reply_cut_short() {
        SlurmPartition p;
        p.name = "cpu";
        p.total_nodes = p.up_nodes = 4;
        const std::string body = encode_partition(p);
        CPPUNIT_ASSERT(reply_complete(body + encode_done()));
        CPPUNIT_ASSERT(reply_complete(encode_done()));
        CPPUNIT_ASSERT(!reply_complete(""));
        CPPUNIT_ASSERT(!reply_complete(body));
        CPPUNIT_ASSERT(!reply_complete(body.substr(0, body.size() - 1)));
        CPPUNIT_ASSERT(!reply_complete(body + "D"));
        CPPUNIT_ASSERT(!reply_complete(encode_done() + body));
        SlurmSite site;
        CPPUNIT_ASSERT(decode_reply(body + encode_done(), &site, nullptr));
        CPPUNIT_ASSERT_EQUAL(size_t(1), site.partitions.size());
    }

    void test_groups_allowed_against_naive() {
        const std::vector<std::string> names = {"users", "admin", "gpu", "hpc", "a", "ab"};
        std::mt19937 rng(11);
        for (int trial = 0; trial < 500; ++trial) {
            std::vector<std::string> allow, mine;
            for (const auto& n : names) {
                if (rng() % 3 == 0) allow.push_back(n);
                if (rng() % 3 == 0) mine.push_back(n);
            }
            std::string list;
            for (const auto& a : allow) list += (list.empty() ? "" : ",") + a;
            bool expect = allow.empty();
            for (const auto& a : allow)
                expect = expect || std::find(mine.begin(), mine.end(), a) != mine.end();
            CPPUNIT_ASSERT_EQUAL(expect, groups_allowed(list, mine));
        }
        CPPUNIT_ASSERT(groups_allowed("ALL", {}));
        CPPUNIT_ASSERT(!groups_allowed("ab", {"a"}));  // names, not prefixes
    }

    void test_hole_round_trip() {
        std::vector<StartEstimate> st(3);
        HoleFound h;
        h.wait_seconds = 12.7;
        h.minutes = 42;
        const std::string text = encode_start(1, {true, 900, "", 0, 0}) + encode_hole(1, h) + encode_done();
        CPPUNIT_ASSERT_EQUAL(std::string("H\t1\t12\t42\n"), encode_hole(1, h));
        CPPUNIT_ASSERT(decode_reply(text, nullptr, &st));
        CPPUNIT_ASSERT(st[1].answered);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(900.0, st[1].wait_seconds, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(12.0, st[1].hole_wait_seconds, 0);
        CPPUNIT_ASSERT_EQUAL(42, st[1].hole_minutes);
        CPPUNIT_ASSERT_EQUAL(0, st[0].hole_minutes);
        // malformed or out-of-range H lines are skipped: a 0-minute hole, an index beyond, a bad number
        std::vector<StartEstimate> none(2);
        CPPUNIT_ASSERT(decode_reply("H\t0\t5\t0\nH\t7\t5\t3\nH\t1\t-5\t3\nH\t1\t5\n", nullptr, &none));
        for (const StartEstimate& e : none) CPPUNIT_ASSERT_EQUAL(0, e.hole_minutes);
    }

    // A fake slurmctld whose nodes are free from w0 for `hole` minutes and otherwise from
    // `full` seconds on: find_hole finds the longest limit that starts at w0, exactly when it
    // may ask enough questions, a limit that does start at w0 when it may not, and never more
    // questions than allowed.
    void test_find_hole_against_brute_force() {
        std::mt19937 rng(11);
        for (int trial = 0; trial < 2000; ++trial) {
            const int limit = 2 + static_cast<int>(rng() % 1500);
            const int time_min = 1 + static_cast<int>(rng() % (limit - 1));
            const int hole = time_min + static_cast<int>(rng() % (limit - time_min));  // in [time_min, limit)
            const double w0 = static_cast<double>(rng() % 600), full = w0 + 60 + static_cast<double>(rng() % 7200);
            int asked = 0;
            const StartOracle start = [&](int m) -> std::optional<double> {
                ++asked;
                return m <= hole ? w0 + static_cast<double>(rng() % 4) : full;  // a few seconds of clock drift
            };
            const int cap = 1 + static_cast<int>(rng() % 14);
            const HoleFound h = find_hole(time_min, limit, full, start, cap);
            CPPUNIT_ASSERT_EQUAL(asked, h.probes);
            CPPUNIT_ASSERT(h.probes <= cap);
            CPPUNIT_ASSERT(h.minutes >= time_min && h.minutes <= hole);  // starts in the hole
            CPPUNIT_ASSERT(h.wait_seconds >= w0 && h.wait_seconds < w0 + 4);
            int needed = 1;  // the question at time_min, then one per halving of (time_min, limit)
            for (int span = limit - time_min; span > 1; span = (span + 1) / 2) ++needed;
            if (cap >= needed) CPPUNIT_ASSERT_EQUAL(hole, h.minutes);
        }
    }

    // A fake slurmctld that answers only for a begin at or after `free_from` (a reservation the
    // job may not use ends then): wait_after_reservations returns the wait from the earliest
    // future reservation end at which it answers, asking each end once, earliest first, within
    // max_tries; the naive answer scans the sorted, de-duplicated future ends.
    void test_wait_after_reservations_against_naive() {
        std::mt19937 rng(5);
        const time_t now = 1000000;
        for (int trial = 0; trial < 2000; ++trial) {
            std::vector<time_t> ends;
            const int n = static_cast<int>(rng() % 6);
            for (int k = 0; k < n; ++k) ends.push_back(now - 600 + static_cast<time_t>(rng() % 3600));
            if (n > 1 && rng() % 2) ends.push_back(ends[0]);  // two reservations ending together
            const time_t free_from = now + static_cast<time_t>(rng() % 3000);
            const int max_tries = static_cast<int>(rng() % 5);
            std::vector<time_t> asked_at;
            const BeginOracle start = [&](time_t begin) -> std::optional<double> {
                asked_at.push_back(begin);
                if (begin < free_from) return std::nullopt;
                return static_cast<double>(begin - now);
            };
            int asked = -1;
            const std::optional<double> w = wait_after_reservations(start, ends, now, max_tries, &asked);
            std::vector<time_t> future;
            for (time_t e : ends)
                if (e > now && std::find(future.begin(), future.end(), e) == future.end()) future.push_back(e);
            std::sort(future.begin(), future.end());
            std::optional<double> want;
            std::vector<time_t> want_asked;
            for (size_t k = 0; k < future.size() && static_cast<int>(k) < max_tries; ++k) {
                want_asked.push_back(future[k]);
                if (future[k] >= free_from) {
                    want = static_cast<double>(future[k] - now);
                    break;
                }
            }
            CPPUNIT_ASSERT(want_asked == asked_at);
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(want_asked.size()), asked);
            CPPUNIT_ASSERT_EQUAL(want.has_value(), w.has_value());
            if (want) CPPUNIT_ASSERT_EQUAL(*want, *w);
        }
    }

    void test_find_hole_no_hole() {
        int asked = 0;
        const StartOracle late = [&](int) -> std::optional<double> { return ++asked, 1000.0; };
        // the start at the time_min is not a minute earlier than the full limit's (1030 s): no hole, one question
        HoleFound h = find_hole(5, 60, 1030, late, 6);
        CPPUNIT_ASSERT_EQUAL(0, h.minutes);
        CPPUNIT_ASSERT_EQUAL(1, asked);
        CPPUNIT_ASSERT_EQUAL(1, find_hole(5, 60, 1060, late, 6).minutes > 0 ? 1 : 0);  // exactly 60 s earlier: a hole
        const StartOracle silent = [](int) -> std::optional<double> { return std::nullopt; };
        CPPUNIT_ASSERT_EQUAL(0, find_hole(5, 60, 5000, silent, 6).minutes);
        // nothing to look for: no --time-min, one not below the limit, no questions allowed
        asked = 0;
        CPPUNIT_ASSERT_EQUAL(0, find_hole(0, 60, 5000, late, 6).minutes);
        CPPUNIT_ASSERT_EQUAL(0, find_hole(60, 60, 5000, late, 6).minutes);
        CPPUNIT_ASSERT_EQUAL(0, find_hole(5, 60, 5000, late, 0).minutes);
        CPPUNIT_ASSERT_EQUAL(0, asked);
        // limits past the hole not answered: they count as not starting in it
        const StartOracle partial = [](int m) -> std::optional<double> {
            if (m <= 10) return 0.0;
            return std::nullopt;
        };
        const HoleFound p = find_hole(5, 60, 5000, partial, 20);
        CPPUNIT_ASSERT_EQUAL(10, p.minutes);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SlurmReplyTest);

}  // namespace
