# Writes OUT: the CUDA source IN as C++ for the emulation (tests/kernels/CudaEmulation.h), each
# launch `kernel<<<config>>>(args)` rewritten `::ts::emu::Launch(kernel, config)(args)`.
file(READ "${IN}" src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*(<[^<>;()]*>)?)[ \t\r\n]*<<<([^>]*)>>>"
       "::ts::emu::Launch(\\1, \\3)" src "${src}")
if(src MATCHES "<<<")
  message(FATAL_ERROR "EmulateCu: a launch in ${IN} was not rewritten")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} for the CUDA emulation.\n#line 1 \"${IN}\"\n${src}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
