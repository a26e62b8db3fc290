// The per-user cost model cache (lib/api/model_cache.h): round trip, and every
// kind of file it must ignore (corrupt, foreign, stale, unsafe), and writers
// racing each other; the discovered racks in the same cache (topo/discover.h):
// how long each kind of result stands. Each case works in a fresh directory under /tmp, never in
// the user's cache.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "api/model_cache.h"
#include "core/cache_file.h"
#include "topo/discover.h"
#include "plan/cost.h"

using namespace bc;

namespace {

const char kSig[] = "p8/L1:g4q2m2/L2:g2q4m4";
const char kKey[] = "p8/L1:g4q2m2/L2:g2q4m4 t=shm,ucx 1a 1a 2b 2b 3c 3c 4d 4d";

std::string model_text(double alpha2 = 900e-6, const char *sig = kSig) {
  CostModel m;
  for (Algo a : {Algo::Ring, Algo::Rhd, Algo::Rd}) {
    m.fits[{1, a}] = {12.5e-6, 0.25e-9};
    m.fits[{2, a}] = {alpha2, 61e-9};
  }
  return model_serialize(m, sig);
}

// A fresh directory, removed with everything in it at the end of the case.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/bc-model-cache-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    const std::string cmd = "rm -rf '" + path + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path.c_str());
  }
};

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// A fresh directory holding one good model under kKey, as stored.
struct StoredModel {
  TempDir tmp;
  std::string dir = tmp.path;
  std::string path = model_cache_path(dir, kKey);
  std::string why;
  std::string good;
  StoredModel() {
    REQUIRE(model_cache_store(dir, kKey, model_text(), &why));
    good = slurp(path);
  }
};

// The file with one header line replaced (the model's checksum stays right).
std::string with_header(const std::string &text, const std::string &name, const std::string &value) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size() + 1, name + " ") == 0) line = name + " " + value;
    out << line << "\n";
  }
  return out.str();
}

int count_files(const std::string &dir) {
  int n = 0;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.' || std::string(e->d_name).find(".tmp.") != std::string::npos) ++n;
    closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("model cache: stored models load back for their key only", "[model_cache]") {
  TempDir tmp;
  const std::string dir = tmp.path + "/a/b";  // missing parents are created
  std::string why;
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(model_cache_store(dir, kKey, model_text(), &why));
  INFO(why);
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why) == model_text());
  REQUIRE(why.empty());
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0700);
  REQUIRE(stat(model_cache_path(dir, kKey).c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0600);
  REQUIRE(count_files(dir) == 1);  // no temporary file left behind
  // Rewritten: the new model replaces the old.
  REQUIRE(model_cache_store(dir, kKey, model_text(700e-6), &why));
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why) == model_text(700e-6));
  // Another key has another file, and nothing in it yet.
  REQUIRE(model_cache_load(dir, std::string(kKey) + " 5e", kSig, 0, &why).empty());
  REQUIRE(why == "no cached model");
}

TEST_CASE("model cache: foreign, corrupt and stale files are ignored", "[model_cache]") {
  StoredModel stored;
  const std::string &dir = stored.dir, &path = stored.path, &good = stored.good;
  std::string &why = stored.why;
  REQUIRE(!good.empty());
  auto ignored = [&](const std::string &text, const char *reason) {
    spit(path, text);
    const std::string got = model_cache_load(dir, kKey, kSig, 3600 * 1000, &why);
    INFO("expected: " << reason << "; got: " << why);
    REQUIRE(got.empty());
    REQUIRE(why.find(reason) != std::string::npos);
  };
  // Another key stored under this name (a hash collision, or a copied file).
  ignored(with_header(good, "key", "p8/L1:g4q2m2/L2:g2q4m4 t=shm,ucx 1a 1a 2b 2b 3c 3c 4d 5e"), "another layout or other hosts");
  ignored(with_header(good, "library", "0.0.1"), "written by BlueConnect 0.0.1");
  ignored(with_header(good, "bccache", "2"), "not a BlueConnect cache file");
  ignored("", "not a BlueConnect cache file");
  ignored("\x7f" "ELF\x02\x01\x01 garbage\n", "not a BlueConnect cache file");
  ignored(good.substr(0, good.size() - 20), "checksum mismatch");  // truncated
  std::string edited = good;
  edited[edited.size() - 5] = edited[edited.size() - 5] == '1' ? '2' : '1';
  ignored(edited, "checksum mismatch");
  ignored(with_header(good, "written", std::to_string(static_cast<long long>(time(nullptr)) - 7200)),
          "older than BC_MODEL_CACHE_AGE");
  ignored(with_header(good, "written", std::to_string(static_cast<long long>(time(nullptr)) + 86400)),
          "in the future");
  ignored(with_header(good, "written", "yesterday"), "bad 'written' time");
  // No age limit: the old file is good.
  spit(path, with_header(good, "written", "1000"));
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why) == model_text());
  // The model inside is for another layout, or does not parse, or is absurd:
  // each written with a right checksum, so only the model check catches it.
  REQUIRE(model_cache_store(dir, kKey, model_text(900e-6, "p4/L1:g2q2m2/L2:g2q2m2"), &why));
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(why.find("for another layout") != std::string::npos);
  REQUIRE(model_cache_store(dir, kKey, "bcmodel 1\nlayout p8\nfit one two\n", &why));
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(why.find("line 3") != std::string::npos);
  REQUIRE(model_cache_store(dir, kKey, model_text(1e6), &why));
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(why.find("out of range") != std::string::npos);
  // Too large to be ours.
  spit(path, good + std::string(kModelCacheMaxBytes, '#'));
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(why.find("larger than") != std::string::npos);
}

TEST_CASE("model cache: files and directories others can change are not trusted", "[model_cache]") {
  StoredModel stored;
  const std::string &dir = stored.dir, &path = stored.path;
  std::string &why = stored.why;
  REQUIRE(chmod(path.c_str(), 0666) == 0);
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(why.find("writable by group or others") != std::string::npos);
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  REQUIRE(chmod(dir.c_str(), 0777) == 0);
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(why.find("writable by group or others") != std::string::npos);
  REQUIRE(!model_cache_store(dir, kKey, model_text(), &why));  // nor written there
  REQUIRE(chmod(dir.c_str(), 0700) == 0);
  // A link is not followed, even to a good file.
  const std::string elsewhere = dir + "/elsewhere.txt";
  REQUIRE(rename(path.c_str(), elsewhere.c_str()) == 0);
  REQUIRE(symlink(elsewhere.c_str(), path.c_str()) == 0);
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(unlink(path.c_str()) == 0);
  REQUIRE(rename(elsewhere.c_str(), path.c_str()) == 0);
  REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why) == model_text());
  // Another user's file (only root can make one here).
  if (geteuid() == 0) {
    REQUIRE(chown(path.c_str(), 1, 1) == 0);
    REQUIRE(model_cache_load(dir, kKey, kSig, 0, &why).empty());
    REQUIRE(why.find("belongs to uid 1") != std::string::npos);
  }
}

TEST_CASE("model cache: writers racing each other leave one whole file", "[model_cache]") {
  TempDir tmp;
  const std::string &dir = tmp.path;
  const int kWriters = 4, kWrites = 100;
  pid_t pids[kWriters];
  for (int w = 0; w < kWriters; ++w) {
    pids[w] = fork();
    REQUIRE(pids[w] >= 0);
    if (pids[w] == 0) {
      std::string why;
      bool ok = true;
      for (int i = 0; i < kWrites; ++i) ok = model_cache_store(dir, kKey, model_text(100e-6 * (w + 1)), &why) && ok;
      _exit(ok ? 0 : 1);
    }
  }
  // Meanwhile every read sees no file yet, or one writer's whole model.
  int seen = 0;
  for (int i = 0; i < 400; ++i) {
    std::string why;
    const std::string got = model_cache_load(dir, kKey, kSig, 0, &why);
    if (got.empty()) {
      INFO(why);
      REQUIRE(why == "no cached model");
      continue;
    }
    ++seen;
    bool one_of_them = false;
    for (int w = 0; w < kWriters; ++w) one_of_them = one_of_them || got == model_text(100e-6 * (w + 1));
    REQUIRE(one_of_them);
  }
  for (int w = 0; w < kWriters; ++w) {
    int status = 0;
    REQUIRE(waitpid(pids[w], &status, 0) == pids[w]);
    REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  std::string why;
  REQUIRE(!model_cache_load(dir, kKey, kSig, 0, &why).empty());
  REQUIRE(count_files(dir) == 1);  // every temporary file renamed away
  (void)seen;
}

TEST_CASE("model cache: the directory", "[model_cache]") {
  ParamSet ps;
  REQUIRE(ps.set(ParamId::CacheDir, "/some/where", "test") == BC_OK);
  REQUIRE(model_cache_dir(ps) == "/some/where");
  ParamSet defaults;
  const char *xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  REQUIRE(model_cache_dir(defaults) == "/xdg/blueconnect");
  unsetenv("XDG_CACHE_HOME");
  const char *home = std::getenv("HOME");
  if (home && home[0] == '/') REQUIRE(model_cache_dir(defaults) == std::string(home) + "/.cache/blueconnect");
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  std::string why;
  REQUIRE(model_cache_load("", kKey, kSig, 0, &why).empty());
  REQUIRE(!why.empty());
  REQUIRE(!model_cache_store("", kKey, model_text(), &why));
}

TEST_CASE("racks cache: racks and flat stand for the age limit, an inconclusive result for 10 minutes", "[model_cache][discover]") {
  TempDir tmp;
  const std::string key = "racks n=4 1a 2b 3c 4d";
  const int64_t week_ms = 168LL * 3600 * 1000;
  std::string why;
  std::vector<int> racks;
  bool flat = true;
  REQUIRE(!discover_cache_read(tmp.path, key, 4, week_ms, &racks, &flat, &why));
  REQUIRE(why == "no cached racks");
  // The body as discover_racks writes it, then written `ago_s` seconds ago.
  const std::string path = cache_path(tmp.path, "racks", key);
  auto store = [&](const std::string &body, long long ago_s) {
    REQUIRE(cache_write(tmp.path, "racks", key, body + "\n# why\n# rates ...\n", &why));
    spit(path, with_header(slurp(path), "written", std::to_string(static_cast<long long>(time(nullptr)) - ago_s)));
  };
  const long long min20 = 20 * 60, min5 = 5 * 60;
  store("racks 0 0 1 1", min20);
  REQUIRE(discover_cache_read(tmp.path, key, 4, week_ms, &racks, &flat, &why));
  REQUIRE(racks == std::vector<int>{0, 0, 1, 1});
  REQUIRE(!flat);
  store("flat", min20);
  REQUIRE(discover_cache_read(tmp.path, key, 4, week_ms, &racks, &flat, &why));
  REQUIRE(racks.empty());
  REQUIRE(flat);
  store("none", min5);
  flat = true;
  REQUIRE(discover_cache_read(tmp.path, key, 4, week_ms, &racks, &flat, &why));
  REQUIRE(racks.empty());
  REQUIRE(!flat);
  // A noisy moment must not hide racks for a week: after 10 minutes, measure again.
  store("none", min20);
  REQUIRE(!discover_cache_read(tmp.path, key, 4, week_ms, &racks, &flat, &why));
  REQUIRE(why.find("older than an inconclusive result's 10 min (20 min)") != std::string::npos);
  REQUIRE(!discover_cache_read(tmp.path, key, 4, 0, &racks, &flat, &why));  // no age limit: still 10 min
  // The age limit applies to every kind.
  store("racks 0 0 1 1", 3 * 3600);
  REQUIRE(!discover_cache_read(tmp.path, key, 4, 2 * 3600 * 1000, &racks, &flat, &why));
  REQUIRE(why.find("older than BC_MODEL_CACHE_AGE (3 h)") != std::string::npos);
  store("none", min5);  // the shorter of the two limits
  REQUIRE(!discover_cache_read(tmp.path, key, 4, 60 * 1000, &racks, &flat, &why));
  REQUIRE(why.find("older than BC_MODEL_CACHE_AGE (5 min)") != std::string::npos);
  // Bodies that do not fit these nodes.
  for (const char *bad : {"racks 0 0 1", "racks 0 0 1 7", "maybe", "none 0"}) {
    store(bad, 0);
    INFO(bad);
    REQUIRE(!discover_cache_read(tmp.path, key, 4, week_ms, &racks, &flat, &why));
    REQUIRE(why.find("bad body") != std::string::npos);
  }
}
