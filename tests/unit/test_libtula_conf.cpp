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
    CPPUNIT_TEST(test_partition_sections);
    CPPUNIT_TEST(test_implicit_partition);
    CPPUNIT_TEST(test_bad_partition_sections);
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
        CPPUNIT_ASSERT(!d.time_min);
        CPPUNIT_ASSERT(tula::parse_config("time_min = yes").time_min);
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_config("time_min = 1"); }), "yes or no"));
        // exclusive: the top level is every section's default and the implicit partition's
        CPPUNIT_ASSERT(!d.exclusive && !d.site_partitions().front().exclusive);
        const tula::Config x = tula::parse_config(
            "exclusive = yes\n[partition a]\nnodes = 2\n[partition b]\nnodes = 2\nexclusive = no\n");
        CPPUNIT_ASSERT(x.exclusive && x.partitions.at(0).exclusive && !x.partitions.at(1).exclusive);
        CPPUNIT_ASSERT(tula::parse_config("exclusive = yes").site_partitions().front().exclusive);
        CPPUNIT_ASSERT(tula::parse_config("[partition a]\nnodes = 1\nexclusive = yes\n").partitions.at(0).exclusive);
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_config("exclusive = whole"); }), "yes or no"));
        for (const char* bad : {"fixed_epochs = 1", "fixed_epochs = true", "fixed_epochs ="}) {
            const std::string e = error_of([&] { tula::parse_config(bad); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "line 1") && contains(e, "yes or no"));
        }
        // A GPU price without GPUs would be silently ignored: refused.
        const std::string e = error_of([] { tula::parse_config("price_per_gpu_hour = 2\n"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "gpus_per_node"));
    }

    // Sections in file order; each key lands in its own section; ranks default to the GPUs,
    // else 1; the top-level node description is each section's default; the class defaults
    // to the partition's name.
    void test_partition_sections() {
        const tula::Config c = tula::parse_config(
            "price_per_node_hour = 3\n"
            "watts_per_node = 100\n"
            "[partition cpu]\n"
            "nodes = 16\n"
            "cpus_per_node = 2\n"
            "\n"
            "[ partition gpu-h100 ]  # eight GPUs\n"
            "nodes = 4\n"
            "gpus_per_node = 8\n"
            "price_per_gpu_hour = 2.5\n"
            "hardware_class = h100-sxm\n"
            "peak_flops = 989e12\n"
            "memory_bandwidth = 3.35e12\n"
            "link_bandwidth = 400e9\n"
            "intra_node_bandwidth = 450e9\n"
            "[partition a100]\n"
            "nodes = 2\n"
            "gpus_per_node = 4\n"
            "ranks_per_node = 2\n"
            "price_per_node_hour = 7\n");
        CPPUNIT_ASSERT_EQUAL(size_t(3), c.partitions.size());
        const tula::PartitionConf& cpu = c.partitions[0];
        CPPUNIT_ASSERT_EQUAL(std::string("cpu"), cpu.name);
        CPPUNIT_ASSERT_EQUAL(std::string("cpu"), cpu.hardware_class);
        CPPUNIT_ASSERT_EQUAL(16, cpu.nodes);
        CPPUNIT_ASSERT_EQUAL(2, cpu.cpus_per_node);
        CPPUNIT_ASSERT_EQUAL(0, cpu.gpus_per_node);
        CPPUNIT_ASSERT_EQUAL(1, cpu.ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(3.0, cpu.price_per_node_hour);
        CPPUNIT_ASSERT_EQUAL(100.0, cpu.watts_per_node);
        const tula::PartitionConf& h = c.partitions[1];
        CPPUNIT_ASSERT_EQUAL(std::string("gpu-h100"), h.name);
        CPPUNIT_ASSERT_EQUAL(std::string("h100-sxm"), h.hardware_class);
        CPPUNIT_ASSERT_EQUAL(8, h.ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(3.0 + 8 * 2.5, h.node_hour_price());
        CPPUNIT_ASSERT_EQUAL(989e12, h.peak_flops);
        CPPUNIT_ASSERT_EQUAL(3.35e12, h.memory_bandwidth);
        CPPUNIT_ASSERT_EQUAL(400e9, h.link_bandwidth);
        CPPUNIT_ASSERT_EQUAL(450e9, h.intra_node_bandwidth);
        const tula::PartitionConf& a = c.partitions[2];
        CPPUNIT_ASSERT_EQUAL(2, a.ranks_per_node);  // written: not the 4 GPUs
        CPPUNIT_ASSERT_EQUAL(7.0, a.price_per_node_hour);
        // max_nodes not written: the sections' nodes stand; written: it caps them
        CPPUNIT_ASSERT_EQUAL(16, c.site_partitions()[0].nodes);
        const tula::Config capped = tula::parse_config("max_nodes = 3\n[partition cpu]\nnodes = 16\n");
        CPPUNIT_ASSERT_EQUAL(3, capped.site_partitions()[0].nodes);
    }

    // A file without sections is one implicit partition built from its top-level keys, with
    // one rank per node whatever its GPUs (as before sections).
    void test_implicit_partition() {
        for (const tula::Config& c : {tula::parse_config(""), tula::parse_config("max_nodes = 6\ngpus_per_node = 8\n"
                                                                                   "price_per_gpu_hour = 1.5\nwatts_per_node = 900\n")}) {
            CPPUNIT_ASSERT(c.partitions.empty());
            CPPUNIT_ASSERT_EQUAL(size_t(1), c.site_partitions().size());
            const tula::PartitionConf p = c.site_partitions()[0];
            CPPUNIT_ASSERT_EQUAL(std::string(), p.name);
            CPPUNIT_ASSERT_EQUAL(std::string(), p.hardware_class);
            CPPUNIT_ASSERT_EQUAL(c.max_nodes, p.nodes);
            CPPUNIT_ASSERT_EQUAL(c.gpus_per_node, p.gpus_per_node);
            CPPUNIT_ASSERT_EQUAL(1, p.ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(c.price_per_node_hour + c.gpus_per_node * c.price_per_gpu_hour, p.node_hour_price());
            CPPUNIT_ASSERT_EQUAL(c.watts_per_node, p.watts_per_node);
        }
        // a default-constructed Config (no file) plans the same implicit partition, and it
        // follows a max_nodes changed after parsing (tula plan --node-range raises it)
        tula::Config d;
        CPPUNIT_ASSERT(d.partitions.empty());
        d.max_nodes = 9;
        CPPUNIT_ASSERT_EQUAL(size_t(1), d.site_partitions().size());
        CPPUNIT_ASSERT_EQUAL(d.max_nodes, d.site_partitions()[0].nodes);
    }

    // Every bad section gives one message naming its line and what to do.
    void test_bad_partition_sections() {
        struct Case {
            const char* text;
            const char* line;
            const char* says;
        };
        const Case cases[] = {
            {"[partition]\nnodes = 1\n", "line 1", "[partition NAME]"},
            {"[queue gpu]\nnodes = 1\n", "line 1", "[partition NAME]"},
            {"[partition gpu\nnodes = 1\n", "line 1", "[partition NAME]"},
            {"[partition a/b]\nnodes = 1\n", "line 1", "[partition NAME]"},
            {"[partition gpu]\nnodes = 1\n[partition gpu]\nnodes = 2\n", "line 3", "described twice"},
            {"[partition gpu]\nnodes = 1\nmax_nodes = 4\n", "line 3", "before the first [partition] section"},
            {"[partition gpu]\nnodes = 1\ncolour = red\n", "line 3", "unknown key 'colour'"},
            {"[partition gpu]\nnodes = 1\nnodes = 2\n", "line 3", "set twice"},
            {"[partition gpu]\nnodes = 0\n", "line 2", "out of range"},
            {"[partition gpu]\nnodes = 1\nranks_per_node = two\n", "line 3", "not an integer"},
            {"[partition gpu]\nnodes = 1\npeak_flops = fast\n", "line 3", "not a number"},
            {"[partition gpu]\nnodes = 1\nhardware_class = a b\n", "line 3", "not a class name"},
            {"[partition gpu]\ngpus_per_node = 4\n", "line 1", "has no nodes"},
            {"[partition gpu]\nnodes = 2\nprice_per_gpu_hour = 1\n", "line 1", "gpus_per_node"},
        };
        for (const Case& k : cases) {
            const std::string e = error_of([&] { tula::parse_config(k.text); });
            CPPUNIT_ASSERT_MESSAGE(std::string(k.text) + " -> " + e, contains(e, k.line) && contains(e, k.says));
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaConfTest);
