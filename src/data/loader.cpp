#include "data/loader.h"

#include "core/error.h"
#include "data/image_source.h"
#include "data/memory_source.h"
#include "data/token_source.h"

namespace ddpx::data {

namespace {

std::unique_ptr<BatchSource> source_for(const Dataset& dataset, const LoaderOptions& o) {
  if (dataset.tokens.defined())
    return std::make_unique<TokenSource>(dataset, o.window_seed, o.windows);
  if (dataset.files)
    return std::make_unique<ImageSource>(dataset, o.transform, o.seed, o.bad_images);
  return std::make_unique<MemorySource>(dataset, o.transform, o.seed, o.per_sample_streams);
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options)
    : DataLoader(source_for(dataset, options), options) {}

DataLoader::DataLoader(std::unique_ptr<BatchSource> source, LoaderOptions options)
    : options_(std::move(options)), source_(std::move(source)) {
  DDPX_CHECK(options_.batch_size >= 1 && options_.num_workers >= 0 && options_.prefetch >= 1 &&
                 options_.limit_batches >= 0,
             ErrorKind::kUsage,
             "loader: batch size {}, {} workers, prefetch {}, limit {}: "
             "expected batch size >= 1, workers >= 0, prefetch >= 1, limit >= 0",
             options_.batch_size, options_.num_workers, options_.prefetch, options_.limit_batches);
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void DataLoader::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch) {
  stop_workers();
  for (int64_t i : indices)
    DDPX_CHECK(i >= 0 && i < source_->size(), ErrorKind::kInternal,
               "loader: sample index {} outside a dataset of {}", i, source_->size());
  indices_ = std::move(indices);
  epoch_ = epoch;
  const int64_t n = static_cast<int64_t>(indices_.size()), b = options_.batch_size;
  num_batches_ = options_.drop_last ? n / b : (n + b - 1) / b;
  if (options_.limit_batches > 0) num_batches_ = std::min(num_batches_, options_.limit_batches);
  DDPX_CHECK(first_batch >= 0 && first_batch <= num_batches_, ErrorKind::kInternal,
             "loader: first batch {} outside an epoch of {} batches", first_batch, num_batches_);
  ready_.clear();
  working_.clear();
  next_to_build_ = first_batch;
  next_to_return_ = first_batch;
  error_ = nullptr;
  stopping_ = false;
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

int64_t DataLoader::num_batches() const { return num_batches_; }

Batch DataLoader::build_batch(int64_t batch_index, const PublishWork& publish) const {
  const int64_t begin = batch_index * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, indices_.size());
  Batch batch =
      source_->gather_shared(indices_.data() + begin, end - begin, epoch_, batch_index, publish);
  if (options_.pin_memory) {
    batch.images = batch.images.pin_memory();
    batch.labels = batch.labels.pin_memory();
  }
  return batch;
}

void DataLoader::worker_loop() {
  while (true) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Build at most `prefetch` batches ahead of the consumer.
      cv_.wait(lock, [&] {
        return stopping_ || error_ || next_to_build_ >= num_batches_ ||
               next_to_build_ < next_to_return_ + options_.prefetch;
      });
      if (stopping_ || error_ || next_to_build_ >= num_batches_) return;
      k = next_to_build_++;
    }
    // The batch's samples, published for the consumer to help with if it waits for them.
    auto publish = [this, k](std::shared_ptr<SampleWork> work) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        working_[k] = std::move(work);
      }
      cv_.notify_all();
    };
    try {
      Batch batch = build_batch(k, publish);
      std::lock_guard<std::mutex> lock(mutex_);
      working_.erase(k);
      ready_.emplace(k, std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      working_.erase(k);
      if (!error_) error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (next_to_return_ >= num_batches_) return std::nullopt;
  if (options_.num_workers == 0) return build_batch(next_to_return_++, nullptr);  // no threads
  std::unique_lock<std::mutex> lock(mutex_);
  // Waiting for a batch a worker has under way, this thread builds its untaken samples too
  // (once: after that the worker finishes what is taken).
  bool helped = false;
  while (true) {
    cv_.wait(lock, [&] {
      return error_ || ready_.count(next_to_return_) > 0 ||
             (!helped && working_.count(next_to_return_) > 0);
    });
    if (error_ || ready_.count(next_to_return_) > 0) break;
    std::shared_ptr<SampleWork> work = working_.at(next_to_return_);
    helped = true;
    lock.unlock();
    work->help();
    lock.lock();
  }
  auto it = ready_.find(next_to_return_);
  if (it == ready_.end()) {
    // A worker failed: surface its error here, on the training thread.
    std::exception_ptr error = error_;
    lock.unlock();
    stop_workers();
    std::rethrow_exception(error);
  }
  Batch batch = std::move(it->second);
  ready_.erase(it);
  ++next_to_return_;
  lock.unlock();
  cv_.notify_all();
  return batch;
}

}  // namespace ddpx::data
