// libtula: the exception type of the library, and the one kind of it a caller acts on.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace tula {

/// Every error libtula reports. what() is one line that starts with "tula: ",
/// says what was wrong and, where it can, what to do about it.
/// Callers at a C boundary (plugin, C API) must catch it (and std::exception).
struct Error : std::runtime_error {
    explicit Error(const std::string& msg)
        : std::runtime_error(msg.rfind("tula: ", 0) == 0 ? msg : "tula: " + msg) {}
};

/// The workload has no compute profile, and its runs cannot stand in for one
/// (profile_from_runs): what a first job that measures itself fixes. `workload` is its name.
struct NoProfileError : Error {
    NoProfileError(const std::string& msg, std::string name) : Error(msg), workload(std::move(name)) {}
    std::string workload;
};

}  // namespace tula
