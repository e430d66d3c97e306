// Image file names from a peer are confined to the session directory.
#include "image_names.hpp"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>

using ferry::pagesrv::acceptable_image_name;

TEST_CASE("image names a peer sends: CRIU's and the engines' pass, hostile ones do not") {
    for (const char* ok : {"pagemap-1.img", "pages-1.img", "inventory.img", "stats-dump",
                           "engine.config.json", "engine.rootfs-diff.tar", "core-42.img"}) {
        INFO(ok);
        CHECK(acceptable_image_name(ok));
    }
    const std::string long_name(256, 'a');
    for (const std::string& bad : std::initializer_list<std::string>{
             "", ".", "..", "../etc/passwd", "/etc/passwd", "a/b", "..\\x", ".hidden",
             "lazy-pages.socket", "gate.socket", "lazy-pages.log", "restore.log",
             "criu-restore.conf", "x.socket", "new\nline", "sp ace", std::string("nul\0byte", 8),
             "caf\xc3\xa9", long_name}) {
        INFO(bad);
        CHECK_FALSE(acceptable_image_name(bad));
    }
}
