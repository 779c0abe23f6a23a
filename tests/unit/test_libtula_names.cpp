// Unit tests of the grammar of user values shared by libtula and the SPANK plugin
// (libtula/src/names.c, declared in tula.h): --tula modes and --tula-epochs values.
#include <cppunit/extensions/HelperMacros.h>

#include <cstring>
#include <string>

#include "test_util.hpp"
#include "tula/tula.h"

namespace {

using tula_test::contains;

}  // namespace

class LibtulaNamesTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaNamesTest);
    CPPUNIT_TEST(test_parse_mode);
    CPPUNIT_TEST(test_parse_epochs_mode);
    CPPUNIT_TEST(test_parse_two_words);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_parse_mode() {
        char mode[16], err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode(nullptr, mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("auto"), std::string(mode));
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode("", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("auto"), std::string(mode));
        for (const char* v : {"auto", "time", "cost", "off", "dry-run"}) {
            CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode(v, mode, sizeof mode, err, sizeof err));
            CPPUNIT_ASSERT_EQUAL(std::string(v), std::string(mode));
        }
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode("TIME", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("time"), std::string(mode));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("fast", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_MESSAGE(err, contains(err, "auto, time, cost, off, dry-run") && contains(err, "'fast'"));
        CPPUNIT_ASSERT_MESSAGE(err, std::strncmp(err, "tula: ", 6) == 0);
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("auto\n", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_MESSAGE(err, !contains(err, "\n"));
        const std::string huge(10000, 'z');
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode(huge.c_str(), mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT(std::strlen(err) < sizeof err);
        char tiny[8];
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("auto", tiny, sizeof tiny, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("bogus", mode, sizeof mode, nullptr, 0));  // no err buffer: no crash
        char small_err[10];
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("bogus", mode, sizeof mode, small_err, sizeof small_err));
        CPPUNIT_ASSERT_EQUAL(size_t(9), std::strlen(small_err));
    }

    void test_parse_epochs_mode() {
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(1, tula_parse_epochs_mode("fixed", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_epochs_mode("follow", err, sizeof err));
        for (const char* bad : {"", "FIXED", "fix", "fixed ", "follow\n"}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, tula_parse_epochs_mode(bad, err, sizeof err));
            CPPUNIT_ASSERT_MESSAGE(err, contains(err, "follow") && contains(err, "fixed") && !contains(err, "\n"));
            CPPUNIT_ASSERT(std::strncmp(err, "tula: ", 6) == 0);
        }
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_epochs_mode(nullptr, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_epochs_mode("bogus", nullptr, 0));  // no err buffer: no crash
        CPPUNIT_ASSERT_EQUAL(1, tula_parse_time_min("yes", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_time_min("no", err, sizeof err));
        for (const char* bad : {"", "YES", "1", "yes ", "no\n"}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, tula_parse_time_min(bad, err, sizeof err));
            CPPUNIT_ASSERT_MESSAGE(err, contains(err, "--tula-time-min") && contains(err, "yes") && !contains(err, "\n"));
            CPPUNIT_ASSERT(std::strncmp(err, "tula: ", 6) == 0);
        }
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_time_min(nullptr, nullptr, 0));
        // the whole messages, as the plugin prints them
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_epochs_mode("sometimes", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("tula: invalid --tula-epochs value 'sometimes'; valid values: follow (the epochs "
                                         "follow the planned batch), fixed (train the script's epochs)"),
                             std::string(err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_time_min("maybe", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("tula: invalid --tula-time-min value 'maybe'; valid values: yes (ask for a "
                                         "--time-min, so that backfill may start the job early), no"),
                             std::string(err));
    }

    void test_parse_two_words() {
        char err[TULA_MSG_MAX];
        std::strcpy(err, "stale");
        CPPUNIT_ASSERT_EQUAL(1, tula_parse_two_words("on", "on", "off", "x", "on, off", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string(), std::string(err));  // cleared on success
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_two_words("off", "on", "off", "x", "on, off", err, sizeof err));
        for (const char* bad : {"", "On", "on ", "of", "onoff"}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, tula_parse_two_words(bad, "on", "off", "x", "on, off", err, sizeof err));
            CPPUNIT_ASSERT_EQUAL(std::string("tula: invalid --tula-x value '") + bad + "'; valid values: on, off",
                                 std::string(err));
        }
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_two_words(nullptr, "on", "off", "x", "on, off", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("tula: invalid --tula-x value ''; valid values: on, off"), std::string(err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_two_words("bogus", "on", "off", "x", "on, off", nullptr, 0));
        // a long value is shortened in the message, which stays one line within the buffer
        const std::string huge(10000, 'z');
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_two_words(huge.c_str(), "on", "off", "x", "on, off", err, sizeof err));
        CPPUNIT_ASSERT(std::strlen(err) < sizeof err && !contains(err, "\n") && !contains(err, huge));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaNamesTest);
