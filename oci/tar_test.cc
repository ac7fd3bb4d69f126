#include "oci/tar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace knap::oci {
namespace {

TEST(TarPathTest, Normalises) {
  EXPECT_EQ(normalizeTarPath("./index.json"), "index.json");
  EXPECT_EQ(normalizeTarPath("/etc/passwd"), "etc/passwd");
  EXPECT_EQ(normalizeTarPath("blobs/sha256/"), "blobs/sha256");
  EXPECT_EQ(normalizeTarPath("./"), "");
  EXPECT_EQ(normalizeTarPath("."), "");
}

TEST(TarTest, RoundTripsFilesDirectoriesAndSymlinks) {
  TarWriter w;
  w.addDirectory("etc", 0755, 1234);
  w.addFile("etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0644, 1234);
  w.addFile("bin/app", std::string(1000, 'x'), 04755, 1234, 1000, 1000);
  w.addSymlink("bin/sh", "app", 1234);
  w.addFile("empty", "");
  std::string tar = w.finish();
  EXPECT_EQ(tar.size() % 512, 0u);

  StatusOr<TarReader> r = TarReader::fromString(tar);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  ASSERT_EQ(r->entries().size(), 5u);
  const TarEntry& d = r->entries()[0];
  EXPECT_EQ(d.path, "etc");
  EXPECT_EQ(d.type, TarType::kDirectory);
  EXPECT_EQ(d.mode, 0755u);
  EXPECT_EQ(d.mtime, 1234);
  const TarEntry* app = r->find("./bin/app");
  ASSERT_NE(app, nullptr);
  EXPECT_EQ(app->mode, 04755u);
  EXPECT_EQ(app->uid, 1000u);
  EXPECT_EQ(app->size, 1000u);
  EXPECT_EQ(*r->readFile("bin/app"), std::string(1000, 'x'));
  EXPECT_EQ(*r->readRange(*app, 990, 100), std::string(10, 'x'));
  const TarEntry* sh = r->find("bin/sh");
  ASSERT_NE(sh, nullptr);
  EXPECT_EQ(sh->type, TarType::kSymlink);
  EXPECT_EQ(sh->link_target, "app");
  EXPECT_EQ(*r->readFile("empty"), "");
  EXPECT_EQ(r->readFile("missing").status().code(), Code::kNotFound);
  EXPECT_EQ(r->readFile("bin/app", 10).status().code(), Code::kResourceExhausted);
}

TEST(TarTest, LongNamesUseUstarPrefixOrPax) {
  std::string mid = "dir/" + std::string(90, 'd') + "/" + std::string(60, 'f');  // > 100, splittable
  std::string huge = std::string(120, 'a') + "/" + std::string(120, 'b');        // needs PAX
  TarWriter w;
  w.addFile(mid, "1");
  w.addFile(huge, "2");
  StatusOr<TarReader> r = TarReader::fromString(w.finish());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  ASSERT_EQ(r->entries().size(), 2u);  // the PAX header is not an entry
  EXPECT_EQ(r->entries()[0].path, mid);
  EXPECT_EQ(r->entries()[1].path, huge);
  EXPECT_EQ(*r->readFile(huge), "2");
}

TEST(TarTest, ChunkedReadsSeeEveryByte) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>(i * 7));
  TarWriter w;
  w.addFile("blob", data);
  StatusOr<TarReader> r = TarReader::fromString(w.finish());
  ASSERT_TRUE(r.isOk());
  std::string got;
  int calls = 0;
  Status s = r->readChunks(*r->find("blob"), 1024, [&](std::string_view chunk) {
    ++calls;
    got.append(chunk);
    return Status::ok();
  });
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(got, data);
}

TEST(TarTest, RejectsCorruptHeaders) {
  TarWriter w;
  w.addFile("a", "hello");
  std::string tar = w.finish();
  tar[10] ^= 1;  // breaks the checksum
  EXPECT_EQ(TarReader::fromString(tar).status().code(), Code::kInvalidArgument);

  TarWriter w2;
  w2.addFile("a", std::string(2000, 'z'));
  std::string cut = w2.finish().substr(0, 1024);  // content runs past the end
  EXPECT_EQ(TarReader::fromString(cut).status().code(), Code::kInvalidArgument);
}

TEST(TarTest, ReadsGnuTarOutput) {
  // Cross-check the reader against the system tar, when there is one.
  char dir[] = "/tmp/knap-tar-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string d = dir;
  std::string longname = std::string(130, 'n');
  {
    std::ofstream(d + "/" + longname) << "long";
    std::ofstream(d + "/short.txt") << "short";
  }
  std::string cmd = "cd " + d + " && tar --format=gnu -cf out.tar short.txt " + longname + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no system tar";
  StatusOr<TarReader> r = TarReader::open(d + "/out.tar");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(*r->readFile("short.txt"), "short");
  EXPECT_EQ(*r->readFile(longname), "long");  // GNU 'L' long-name record
  std::system(("rm -rf " + d).c_str());
}

TEST(TarTest, SystemTarReadsOurOutput) {
  char dir[] = "/tmp/knap-tar-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string d = dir;
  TarWriter w;
  w.addDirectory("x");
  w.addFile("x/" + std::string(150, 'q'), "content", 0600);
  std::string tar = w.finish();
  std::ofstream(d + "/in.tar", std::ios::binary).write(tar.data(), static_cast<std::streamsize>(tar.size()));
  std::string cmd =
      "cd " + d + " && tar -xf in.tar 2>&1 && test \"$(cat x/" + std::string(150, 'q') + ")\" = content";
  if (std::system("command -v tar >/dev/null") != 0) GTEST_SKIP() << "no system tar";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::system(("rm -rf " + d).c_str());
}

}  // namespace
}  // namespace knap::oci
