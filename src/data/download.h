// Fetching the official dataset files: libcurl into `<file>.part`, an MD5 check (OpenSSL
// EVP), then a rename into place and, for tar.gz archives, unpacking. Any failure (timeout,
// HTTP error, a connection that stops mid-file, a checksum mismatch) throws one ddpx::Error
// and leaves neither the .part file nor a half-written target behind.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddpx::data {

struct RemoteFile {
  std::string base_url;  // ends with '/'
  std::string file;      // appended to base_url; also the local file name
  std::string md5;       // lowercase hex
  bool unpack = false;   // a tar.gz to extract into data_dir after the check
  std::string sha256;    // lowercase hex, checked too when set (the text files' publishers
                         // give SHA-256: tiktoken's expected_hash)
};

struct DownloadOptions {
  std::string data_dir;  // empty: ./data/NAME
  std::string mirror;    // replaces each file's base_url (also env DDPX_DATA_MIRROR)
  // An md5sum-format list ("HASH  FILE" lines) replacing the official checksums, for a mirror
  // that serves other copies of the files (a cut-down or re-compressed set); empty: official.
  std::string checksums;
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;  // abort when under 1 byte/s for this long
  bool progress = false;      // log each file on stderr
};

// The official files of a dataset (mnist, fashion-mnist, cifar10, cifar100, and for language
// models tinyshakespeare and gpt2-vocab, GPT-2's tiktoken rank file); throws kUsage for any
// other name.
std::vector<RemoteFile> remote_files(const std::string& name);

// Reads an md5sum-format file into FILE -> lowercase MD5; throws kUsage naming the file and
// line for a line that is not "32-hex-digits  NAME".
std::map<std::string, std::string> read_checksums(const std::string& path);

// Downloads (skipping files already present with the right checksum) and unpacks. With
// options.checksums, every file of the dataset must be listed there.
// Returns the data_dir used.
std::string download_dataset(const std::string& name, const DownloadOptions& options);

// One file into data_dir, verified; unpacked when file.unpack.
void fetch_file(const RemoteFile& file, const std::string& data_dir,
                const DownloadOptions& options);

std::string md5_file(const std::string& path);  // lowercase hex

}  // namespace ddpx::data
