# DDPX_SANITIZE: AddressSanitizer + UndefinedBehaviorSanitizer on every target (gcc or clang).
# Applied globally so the shared precompiled header matches every user of it (clang refuses a
# PCH built with other sanitizer flags). -g1 gives file:line in reports at little build cost.
# Run with the settings in cmake/sanitizer.env (scripts/test sources it); cmake/lsan.supp
# lists the leaks inside libtorch and system libraries that are not ours.
if(DDPX_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=address,undefined)
endif()
