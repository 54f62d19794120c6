# memlayer_strict(target): the project's warning set on one of its own
# targets (never on third-party code such as PoCL's bufalloc in bench/).
function(memlayer_strict target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(MEMLAYER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
