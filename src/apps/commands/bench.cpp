#include "apps/commands/commands.h"
#include "core/error.h"
namespace occ::cmd {
int bench(int, char**) { fail("bench: not built yet"); }
}  // namespace occ::cmd
