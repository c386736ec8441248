// File helpers (see file_util.h).
#include "core/common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/check.h"

namespace booster {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BOOSTER_CHECK_T(IOError, f.good(), "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream os;
  os << f.rdbuf();
  BOOSTER_CHECK_T(IOError, !f.bad(), "error reading '", path, "'");
  return os.str();
}

bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

void write_file_atomic(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on the chain of operator+.
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp.";
  name += std::to_string(::getpid());
  const std::string tmp = (dir / name).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BOOSTER_CHECK_T(IOError, fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      BOOSTER_THROW(IOError, "writing '", tmp, "': ", std::strerror(err));
    }
    done += size_t(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    BOOSTER_THROW(IOError, "cannot write '", path, "': ", std::strerror(err));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace booster
