// A directory under /tmp for one test, removed with everything in it.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace ferry::test {

struct temp_dir {
    std::filesystem::path path;
    explicit temp_dir(const std::string& prefix = "ferry-test") {
        std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
        REQUIRE(::mkdtemp(tmpl.data()));
        path = tmpl;
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

} // namespace ferry::test
