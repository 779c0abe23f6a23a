// Unit tests of the line protocol between the tula CLI and its slurmctld query child
// (cli/slurm_query.hpp): what is encoded decodes to the same values, field separators inside
// names cannot forge records, malformed and out-of-range lines are skipped, a failure line
// marks the whole reply failed, and the AllowGroups check against a naive membership test.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../../cli/slurm_query.hpp"

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
};

CPPUNIT_TEST_SUITE_REGISTRATION(SlurmReplyTest);

}  // namespace
