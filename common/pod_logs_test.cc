#include "common/pod_logs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace knap {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

TEST(PodLogs, FindsThePodsOfARevisionOrServiceInTheNamespace) {
  fs::path dir = fs::path(::testing::TempDir()) / ("knap-podlogs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  EXPECT_TRUE(findPodLogs(dir.string(), "default", "hello-00001").empty());  // no pods dir yet
  write(dir / "pods/p2/meta.json",
        R"({"pod":"p2","namespace":"default","revision":"hello-00001","service":"hello"})");
  write(dir / "pods/p1/meta.json",
        R"({"pod":"p1","namespace":"default","revision":"hello-00002","service":"hello"})");
  write(dir / "pods/p3/meta.json",
        R"({"pod":"p3","namespace":"other","revision":"hello-00001","service":"hello"})");
  write(dir / "pods/p4/meta.json", "not json");
  write(dir / "pods/p5/meta.json", R"({"pod":5,"namespace":"default","revision":["x"]})");
  auto rev = findPodLogs(dir.string(), "default", "hello-00001");
  ASSERT_EQ(rev.size(), 1u);
  EXPECT_EQ(rev[0].pod, "p2");
  EXPECT_EQ(rev[0].stdout_path, (dir / "pods/p2/stdout.log").string());
  auto svc = findPodLogs(dir.string(), "default", "hello");
  ASSERT_EQ(svc.size(), 2u);
  EXPECT_EQ(svc[0].pod, "p1");
  EXPECT_EQ(svc[1].pod, "p2");
  fs::remove_all(dir);
}

TEST(PodLogs, TailStartsAtALineAndSaysWhatWasCut) {
  fs::path f = fs::path(::testing::TempDir()) / ("knap-podlog-tail-" + std::to_string(::getpid()) + ".log");
  write(f, "first line\nsecond line\nthird\n");
  bool cut = true;
  auto all = readLogTail(f.string(), 1000, &cut);
  ASSERT_TRUE(all.isOk());
  EXPECT_EQ(*all, "first line\nsecond line\nthird\n");
  EXPECT_FALSE(cut);
  auto tail = readLogTail(f.string(), 15, &cut);
  ASSERT_TRUE(tail.isOk());
  EXPECT_EQ(*tail, "third\n");  // "d line\nthird\n" minus the partial line
  EXPECT_TRUE(cut);
  auto missing = readLogTail(f.string() + ".nope", 10, &cut);
  ASSERT_TRUE(missing.isOk());
  EXPECT_EQ(*missing, "");
  fs::remove(f);
}

}  // namespace
}  // namespace knap
