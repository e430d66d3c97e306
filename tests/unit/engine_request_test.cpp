// The runc shim's request files: what the migrator writes reads back the
// same, and a request shaped by someone else gets a clear error.
#include "engine_request.hpp"

#include <catch2/catch.hpp>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

using namespace ferry::engines;
using Catch::Matchers::Contains;

namespace {

struct scratch_dir {
    std::filesystem::path path;
    scratch_dir() {
        char tmpl[] = "/tmp/ferry-request-test.XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~scratch_dir() { std::filesystem::remove_all(path); }
};

void write_text(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p) << text;
}

} // namespace

TEST_CASE("a checkpoint request reads back as it was written", "[engine_request]") {
    scratch_dir d;
    checkpoint_request r;
    r.migration_id = "0123456789abcdef";
    r.migrator_pid = 4242;
    r.page_server_port = 27001;
    r.status_fifo = "/run/ferry/x/status";
    r.images_dir = "/run/ferry/x/images";
    r.criu_env = {"CRIU_FAULT=130"};
    write_request(d.path / "c.json", r);
    const auto back = read_checkpoint_request(d.path / "c.json");
    REQUIRE(back);
    CHECK(back->migration_id == r.migration_id);
    CHECK(back->migrator_pid == 4242);
    CHECK(back->page_server_port == 27001);
    CHECK(back->status_fifo == r.status_fifo);
    CHECK(back->images_dir == r.images_dir);
    CHECK(back->criu_env == r.criu_env);
    CHECK_FALSE(read_checkpoint_request(d.path / "missing.json"));
}

TEST_CASE("a request with numbers out of range or of the wrong kind is refused",
          "[engine_request]") {
    scratch_dir d;
    const std::string head =
        R"({"migration_id": "ab", "migrator_pid": 1, "status_fifo": "/run/x", "criu_config": "", )"
        R"("images_dir": "", "page_server_port": )";
    // 2.7e32 parses as a float: converting it to a port was undefined
    // behaviour (found by fuzz-engine-request).
    for (const char* port :
         {"270000000000000000000000000000001", "70000", "-1", "27001.5", "\"27001\"", "true"}) {
        write_text(d.path / "r.json", head + port + "}");
        INFO(port);
        CHECK_THROWS_WITH(read_checkpoint_request(d.path / "r.json"),
                          Contains("lacks a valid 'page_server_port'"));
    }
    write_text(d.path / "r.json", head + "65535}");
    CHECK(read_checkpoint_request(d.path / "r.json")->page_server_port == 65535);
}

TEST_CASE("a request for CRIU environment beyond the allowed entry is refused",
          "[engine_request]") {
    scratch_dir d;
    write_text(d.path / "r.json",
               R"({"migration_id": "ab", "migrator_pid": 1, "page_server_port": 1, )"
               R"("status_fifo": "/run/x", "criu_config": "", "images_dir": "", )"
               R"("criu_env": ["LD_PRELOAD=/tmp/evil.so"]})");
    CHECK_THROWS_WITH(read_checkpoint_request(d.path / "r.json"),
                      Contains("'LD_PRELOAD=/tmp/evil.so', which is not allowed"));
    write_text(d.path / "r.json", "{not json");
    CHECK_THROWS_WITH(read_checkpoint_request(d.path / "r.json"), Contains("malformed"));
}
