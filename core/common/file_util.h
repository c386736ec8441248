// Whole-file reads and atomic writes (temp file, fsync, rename), with errors naming the file.
#pragma once

#include <string>

namespace booster {

/// The file's bytes; throws IOError naming the file.
std::string read_text_file(const std::string& path);
/// Writes bytes to path via a temp file in the same folder, fsync, rename, fsync of the folder.
void write_file_atomic(const std::string& path, const std::string& bytes);
/// True when path exists.
bool file_exists(const std::string& path);

}  // namespace booster
