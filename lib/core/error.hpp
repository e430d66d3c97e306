// Errors for setup paths (exceptions that name the syscall) and for hot paths
// (values).
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ferry {

// Thrown by setup code and the CLI; never on the fault path.
class error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// `what` names the syscall or operation, e.g. "connect 10.0.0.2:7140".
[[nodiscard]] inline std::system_error sys_error(const std::string& what, int err = errno) {
    return std::system_error(err, std::generic_category(), what);
}

} // namespace ferry
