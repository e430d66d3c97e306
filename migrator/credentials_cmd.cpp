#include "credentials_cmd.hpp"

#include "tls/authority.hpp"
#include "tls/credentials.hpp"

#include <cstdio>
#include <exception>

namespace ferry::migrator {

int run_credentials_init(const std::filesystem::path& dir) {
    try {
        tls::init_authority(dir);
        std::printf("cluster CA created in %s (keep %s there, and nowhere else)\n", dir.c_str(),
                    tls::ca_key_file);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 1;
    }
}

int run_credentials_issue(const std::filesystem::path& dir, const std::string& host,
                          const std::vector<std::string>& addresses,
                          const std::vector<std::string>& dns_names,
                          const std::filesystem::path& out) {
    try {
        const auto where = out.empty() ? dir : out;
        tls::issue_host(dir, {host, addresses, dns_names}, where);
        std::printf("certificate for %s in %s: copy %s, %s and %s to that host's "
                    "/etc/ferry/credentials\n",
                    host.c_str(), where.c_str(), tls::ca_file, tls::cert_file, tls::key_file);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 1;
    }
}

} // namespace ferry::migrator
