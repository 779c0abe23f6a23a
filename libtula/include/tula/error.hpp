// libtula: the one exception type of the library.
#pragma once
#include <stdexcept>
#include <string>

namespace tula {

/// Every error libtula reports. what() is one line that starts with "tula: ",
/// says what was wrong and, where it can, what to do about it.
/// Callers at a C boundary (plugin, C API) must catch it (and std::exception).
struct Error : std::runtime_error {
    explicit Error(const std::string& msg)
        : std::runtime_error(msg.rfind("tula: ", 0) == 0 ? msg : "tula: " + msg) {}
};

}  // namespace tula
