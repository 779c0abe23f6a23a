// tula: the command-line interface of Tula (tula(1)): plan, profile, db, explain, plot, validate,
// predict. Each command group lives in its own file (plan.cpp, profile.cpp, db.cpp, explain.cpp,
// plot.cpp, validate.cpp, predict.cpp);
// this file parses the command line and maps errors to exit statuses:
//   0 success, 1 runtime error, 2 usage error; messages on stderr start with "tula: ".
#include <cstdio>
#include <cstring>
#include <new>

#include <CLI/CLI.hpp>

#include "common.hpp"
#include "tula/tula.h"
#include "format.hpp"

namespace tula::cli {
void add_validate_command(CLI::App& app, Action* action);  // cli/validate.cpp
}


namespace {

using namespace tula::cli;

// "tula plan" etc.: the chain of subcommands that were selected.
std::string command_path(CLI::App& app) {
    std::string s = "tula";
    CLI::App* a = &app;
    for (;;) {
        auto subs = a->get_subcommands();
        if (subs.empty()) break;
        a = subs.front();
        s += " " + a->get_name();
    }
    return s;
}

// True when the command line asks `plan` or `explain` for --format kv: a usage error is
// then also reported as status=error / message= lines on stdout (the kv contract).
bool wants_kv(int argc, char** argv) {
    bool kv_cmd = false, kv = false;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        if (std::strcmp(a, "plan") == 0 || std::strcmp(a, "explain") == 0) kv_cmd = true;
        if (std::strcmp(a, "--format=kv") == 0) kv = true;
        if (std::strcmp(a, "--format") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "kv") == 0) kv = true;
    }
    return kv_cmd && kv;
}

// Help text on stdout, ending with a newline (CLI11 leaves the footer without one).
void print_help(const std::string& h) {
    std::fputs(h.c_str(), stdout);
    if (!h.empty() && h.back() != '\n') std::fputc('\n', stdout);
}

int usage_error(int argc, char** argv, const std::string& msg, const std::string& cmd) {
    if (wants_kv(argc, argv)) std::fputs(render_kv(error_kv(msg)).c_str(), stdout);
    print_error(msg + "; see " + cmd + " --help");
    return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"tula: plans data-parallel CNN training on Slurm (node count, batch size, time limit) from "
                 "profiled compute and allreduce times, and compares predictions with finished jobs.",
                 "tula"};
    app.footer("Exit status: 0 success, 1 error, 2 usage error. Environment: TULA_CONF, XDG_DATA_HOME, HOME. "
               "See tula(1), tula-train(1), tula.conf(5), spank-tula(8).");
    app.set_help_flag("-h,--help", "print this help and exit");
    bool version = false;
    app.add_flag("--version", version, "print the version and exit");
    app.require_subcommand(0, 1);

    // The command groups. When the first argument names one, only that one is built: a group
    // never sees its siblings' options, so parsing, help and messages are the same, and
    // `tula submit-filter`, which cli_filter.lua runs at every `sbatch --tula` submission, does
    // not pay for building the options of every other command.
    struct Group {
        const char* name;
        void (*add)(CLI::App&, Action*);
    };
    static const Group kGroups[] = {{"plan", add_plan_command},       {"profile", add_profile_command},
                                    {"db", add_db_command},           {"explain", add_explain_command},
                                    {"plot", add_plot_command},       {"validate", add_validate_command},
                                    {"predict", add_predict_command},   {"submit-filter", add_submit_filter_command}};
    const Group* only = nullptr;
    for (const Group& g : kGroups)
        if (argc > 1 && std::strcmp(argv[1], g.name) == 0) only = &g;
    Action action;
    for (const Group& g : kGroups)
        if (!only || only == &g) g.add(app, &action);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        print_help(app.help());
        return kExitOk;
    } catch (const CLI::CallForAllHelp&) {
        print_help(app.help("", CLI::AppFormatMode::All));
        return kExitOk;
    } catch (const CLI::RequiredError& e) {
        const std::string cmd = command_path(app);
        std::string what = e.what();
        if (what.find("ubcommand") != std::string::npos) {
            // `tula` or `tula profile` alone: say which commands there are.
            CLI::App* a = &app;
            for (auto subs = a->get_subcommands(); !subs.empty(); subs = a->get_subcommands()) a = subs.front();
            std::string names;
            for (const CLI::App* s : a->get_subcommands([](CLI::App*) { return true; }))
                names += (names.empty() ? "" : ", ") + s->get_name();
            what = "a command is required: " + names;
        }
        return usage_error(argc, argv, what, cmd);
    } catch (const CLI::ParseError& e) {
        return usage_error(argc, argv, e.what(), command_path(app));
    }
    if (version) {
        std::printf("tula %s\n", TULA_VERSION);
        return kExitOk;
    }
    if (!action) {
        // `tula` alone: name the commands this program has (from the parser, so never stale).
        std::string names;
        for (const CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
            names += (names.empty() ? "" : ", ") + s->get_name();
        print_error("a command is required: " + names + "; see tula --help");
        return kExitUsage;
    }
    try {
        return action();
    } catch (const UsageError& e) {
        print_error(std::string(e.what()) + "; see " + command_path(app) + " --help");
        return kExitUsage;
    } catch (const std::bad_alloc&) {
        print_error("out of memory");
        return kExitError;
    } catch (const std::exception& e) {
        print_error(e.what());
        return kExitError;
    }
}
