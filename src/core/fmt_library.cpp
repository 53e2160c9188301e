// fmt's compiled part, built once here rather than in every translation unit.
//
// libtorch's headers bring fmt 12 (c10d's include it), and a second fmt would meet that one in a
// translation unit, so ddpx uses it. The wheel ships its headers but not its src/format.cc, and
// libc10 does not export fmt's symbols. Header-only (FMT_HEADER_ONLY) every translation unit
// compiles format-inl.h's formatting engine again: 3 CPU-seconds of each of the build's 80 at
// -O3 (a unity batch of src/optim: 14.2-15.0 s with it, 11.2-11.8 s without; 2-core EPYC,
// 2026-12-07). So the build's own code declares fmt's functions and this file defines them, as
// fmt's src/format.cc does; an installed ddpx's users keep header-only fmt (cmake/torch.cmake).
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE

#if FMT_USE_LOCALE
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
#endif

namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail

FMT_END_NAMESPACE
