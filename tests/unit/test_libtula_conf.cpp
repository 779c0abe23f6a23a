// Unit tests of libtula's tula.conf parser, loader and user database path (conf.hpp).
#include <cppunit/extensions/HelperMacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "test_util.hpp"
#include "tula/conf.hpp"
#include "tula/error.hpp"

namespace {

using tula_test::error_of;
using tula_test::contains;

}  // namespace

class LibtulaConfTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaConfTest);
    CPPUNIT_TEST(test_valid_file);
    CPPUNIT_TEST(test_empty_gives_defaults);
    CPPUNIT_TEST(test_unknown_key_names_line);
    CPPUNIT_TEST(test_bad_numbers_rejected);
    CPPUNIT_TEST(test_syntax_errors);
    CPPUNIT_TEST(test_load_config);
    CPPUNIT_TEST(test_user_db_path);
    CPPUNIT_TEST(test_device_memory_and_noise_scale);
    CPPUNIT_TEST(test_gpu_price_and_energy);
    CPPUNIT_TEST(test_admin_uid);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_valid_file() {
        const std::string text =
            "# site configuration\n"
            "\n"
            "system_db = /srv/tula/profiles.db   # shared\n"
            "price_per_node_hour=2.5\n"
            "   max_nodes =  8\r\n"
            "global_batches = 256, 64,128 ,64\n"
            "time_margin = 0.5\n"
            "time_overhead = 30\n"
            "default_epochs = 7";  // no final newline
        const tula::Config c = tula::parse_config(text);
        CPPUNIT_ASSERT_EQUAL(std::string("/srv/tula/profiles.db"), c.system_db);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.5, c.price_per_node_hour, 0.0);
        CPPUNIT_ASSERT_EQUAL(8, c.max_nodes);
        // sorted, duplicates removed
        CPPUNIT_ASSERT_EQUAL(size_t(3), c.global_batches.size());
        CPPUNIT_ASSERT_EQUAL(64, c.global_batches[0]);
        CPPUNIT_ASSERT_EQUAL(128, c.global_batches[1]);
        CPPUNIT_ASSERT_EQUAL(256, c.global_batches[2]);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, c.time_margin, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(30.0, c.time_overhead, 0.0);
        CPPUNIT_ASSERT_EQUAL(7, c.default_epochs);
    }

    void test_empty_gives_defaults() {
        const tula::Config d;
        for (const char* text : {"", "\n\n# only a comment\n", "   \n\t\n"}) {
            const tula::Config c = tula::parse_config(text);
            CPPUNIT_ASSERT_EQUAL(d.system_db, c.system_db);
            CPPUNIT_ASSERT_EQUAL(d.max_nodes, c.max_nodes);
            CPPUNIT_ASSERT(d.global_batches == c.global_batches);
            CPPUNIT_ASSERT_EQUAL(d.default_epochs, c.default_epochs);
        }
    }

    void test_unknown_key_names_line() {
        const std::string e = error_of([] { tula::parse_config("# c\nmax_nodes = 2\n\nmax_node = 3\n"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 4"));
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "unknown key 'max_node'"));
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "max_nodes"));  // lists the valid keys
        CPPUNIT_ASSERT_MESSAGE(e, e.rfind("tula: ", 0) == 0);
    }

    void test_bad_numbers_rejected() {
        struct Case {
            const char* text;
            const char* line;
        } cases[] = {
            {"price_per_node_hour = abc\n", "line 1"},
            {"\nprice_per_node_hour = 1.5x\n", "line 2"},
            {"max_nodes = 2.5\n", "line 1"},
            {"max_nodes = 0\n", "line 1"},
            {"max_nodes = 99999999999999999999\n", "line 1"},
            {"time_margin = -0.1\n", "line 1"},
            {"time_overhead = nan\n", "line 1"},
            {"time_overhead = inf\n", "line 1"},
            {"default_epochs = \n", "line 1"},
            {"global_batches = 64,,128\n", "line 1"},
            {"global_batches = 64,-128\n", "line 1"},
            {"a=b\n", "line 1"},
        };
        for (const auto& c : cases) {
            const std::string e = error_of([&] { tula::parse_config(c.text); });
            CPPUNIT_ASSERT_MESSAGE(std::string("accepted: ") + c.text, !e.empty());
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, c.line));
        }
    }

    void test_syntax_errors() {
        std::string e = error_of([] { tula::parse_config("max_nodes 4\n"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 1") && contains(e, "key = value"));
        e = error_of([] { tula::parse_config("max_nodes = 4\nmax_nodes = 5\n"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 2") && contains(e, "twice"));
        e = error_of([] { tula::parse_config(" = 4\n"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 1"));
    }

    void test_load_config() {
        const tula_test::TempDir dir("conf");
        const std::string path = dir / "tula.conf";
        {
            std::ofstream f(path);
            f << "max_nodes = 3\nprice_per_node_hour = 0.25\n";
        }
        const tula::Config c = tula::load_config(path);
        CPPUNIT_ASSERT_EQUAL(3, c.max_nodes);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25, c.price_per_node_hour, 0.0);
        {
            std::ofstream f(path);
            f << "max_nodes = 3\nbogus = 1\n";
        }
        std::string e = error_of([&] { tula::load_config(path); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, path) && contains(e, "line 2"));
        const std::string missing = dir / "missing.conf";
        e = error_of([&] { tula::load_config(missing); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, missing) && contains(e, "No such file"));
        e = error_of([&] { tula::load_config(dir.path); });  // a directory
        CPPUNIT_ASSERT_MESSAGE(e, !e.empty());
    }

    void test_user_db_path() {
        CPPUNIT_ASSERT_EQUAL(std::string("/x/tula/profiles.db"), tula::user_db_path("/x", "/home/u"));
        CPPUNIT_ASSERT_EQUAL(std::string("/home/u/.local/share/tula/profiles.db"), tula::user_db_path("", "/home/u"));
        CPPUNIT_ASSERT_EQUAL(std::string("/home/u/.local/share/tula/profiles.db"), tula::user_db_path(nullptr, "/home/u"));
        // relative XDG_DATA_HOME is invalid per the XDG base directory specification
        CPPUNIT_ASSERT_EQUAL(std::string("/home/u/.local/share/tula/profiles.db"), tula::user_db_path("rel", "/home/u"));
        CPPUNIT_ASSERT_EQUAL(std::string("/x/tula/profiles.db"), tula::user_db_path("/x", nullptr));
        const std::string e = error_of([] { tula::user_db_path(nullptr, ""); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "HOME"));
    }

    void test_device_memory_and_noise_scale() {
        CPPUNIT_ASSERT_EQUAL(0.0, tula::parse_config("").device_memory_bytes);
        CPPUNIT_ASSERT_EQUAL(17179869184.0, tula::parse_config("device_memory_bytes = 16G\n").device_memory_bytes);
        CPPUNIT_ASSERT_EQUAL(1000.0, tula::parse_config("device_memory_bytes = 1000").device_memory_bytes);
        CPPUNIT_ASSERT_EQUAL(3.0 * 1024 * 1024, tula::parse_config("device_memory_bytes = 3m").device_memory_bytes);
        CPPUNIT_ASSERT_EQUAL(500.0, tula::parse_config("noise_scale = 500").noise_scale);
        for (const char* bad : {"device_memory_bytes = -1", "device_memory_bytes = 16X", "device_memory_bytes = G",
                                "device_memory_bytes = 1.5G", "device_memory_bytes = 2000T", "device_memory_bytes =",
                                "noise_scale = 0", "noise_scale = -3", "noise_scale = nan"}) {
            std::string e;
            try {
                tula::parse_config(bad);
            } catch (const tula::Error& x) {
                e = x.what();
            }
            CPPUNIT_ASSERT_MESSAGE(bad, contains(e, "line 1"));
        }
    }

    // admin_uid: a numeric uid in [0, 4294967294], default 0 (root alone); a name, a negative
    // number or (uid_t)-1 is refused with the line named.
    void test_admin_uid() {
        CPPUNIT_ASSERT_EQUAL(uint32_t(0), tula::parse_config("").admin_uid);
        CPPUNIT_ASSERT_EQUAL(uint32_t(1234), tula::parse_config("admin_uid = 1234\n").admin_uid);
        CPPUNIT_ASSERT_EQUAL(uint32_t(4294967294u), tula::parse_config("admin_uid = 4294967294\n").admin_uid);
        for (const char* bad : {"admin_uid = tulaadm\n", "admin_uid = -1\n", "admin_uid = 4294967295\n", "admin_uid =\n"}) {
            const std::string e = error_of([&] { tula::parse_config(std::string("# site\n") + bad); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 2") && contains(e, "admin_uid"));
        }
    }

    void test_gpu_price_and_energy() {
        const tula::Config d = tula::parse_config("");
        CPPUNIT_ASSERT_EQUAL(0, d.gpus_per_node);
        CPPUNIT_ASSERT_EQUAL(0.0, d.price_per_gpu_hour);
        CPPUNIT_ASSERT_EQUAL(0.0, d.watts_per_node);
        const tula::Config c = tula::parse_config("gpus_per_node = 8\nprice_per_gpu_hour = 2.5\nwatts_per_node = 6500\n");
        CPPUNIT_ASSERT_EQUAL(8, c.gpus_per_node);
        CPPUNIT_ASSERT_EQUAL(2.5, c.price_per_gpu_hour);
        CPPUNIT_ASSERT_EQUAL(6500.0, c.watts_per_node);
        for (const char* bad : {"gpus_per_node = -1", "gpus_per_node = 1.5", "price_per_gpu_hour = -2",
                                "watts_per_node = inf", "watts_per_node = x"})
            CPPUNIT_ASSERT_MESSAGE(bad, contains(error_of([&] { tula::parse_config(bad); }), "line 1"));
        CPPUNIT_ASSERT_EQUAL(0.01, d.max_accuracy_loss);
        CPPUNIT_ASSERT_EQUAL(0.02, tula::parse_config("max_accuracy_loss = 0.02").max_accuracy_loss);
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_config("max_accuracy_loss = 2"); }), "line 1"));
        CPPUNIT_ASSERT(!d.fixed_epochs);
        CPPUNIT_ASSERT(tula::parse_config("fixed_epochs = yes").fixed_epochs);
        CPPUNIT_ASSERT(!tula::parse_config("fixed_epochs = no").fixed_epochs);
        for (const char* bad : {"fixed_epochs = 1", "fixed_epochs = true", "fixed_epochs ="}) {
            const std::string e = error_of([&] { tula::parse_config(bad); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 1") && contains(e, "yes or no"));
        }
        // A GPU price without GPUs would be silently ignored: refused.
        const std::string e = error_of([] { tula::parse_config("price_per_gpu_hour = 2\n"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "gpus_per_node"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaConfTest);
