#include "criu/criu_rpc.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <chrono>
#include <fstream>

using namespace ferry;

namespace {

// A "criu" that ends as `body` says, without a word on its service socket.
std::string fake_criu(const test::temp_dir& dir, const std::string& body) {
    const auto path = dir.path / "criu";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path.string();
}

std::string failure_of(const std::string& criu) {
    auto s = criu::service::start(criu);
    try {
        (void)s.receive(net::after(std::chrono::seconds(10)));
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("a CRIU that dies without an answer is reported with how it ended") {
    test::temp_dir dir;
    const auto crashed = failure_of(fake_criu(dir, "kill -SEGV $$"));
    CHECK_THAT(crashed, Catch::Contains("exited without an answer"));
    CHECK_THAT(crashed, Catch::Contains("killed by signal 11 (Segmentation fault"));

    const auto exited = failure_of(fake_criu(dir, "exit 3"));
    CHECK_THAT(exited, Catch::Contains("exit status 3"));
}
