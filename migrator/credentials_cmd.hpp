// `migrator credentials init|issue`: a cluster CA, and host certificates
// signed by it (lib/tls/authority.hpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry::migrator {

int run_credentials_init(const std::filesystem::path& dir);
// Writes OUT/{ca,cert,key}.pem for HOST; OUT defaults to DIR itself (this
// host). Prints where they went.
int run_credentials_issue(const std::filesystem::path& dir, const std::string& host,
                          const std::vector<std::string>& addresses,
                          const std::vector<std::string>& dns_names,
                          const std::filesystem::path& out);

} // namespace ferry::migrator
