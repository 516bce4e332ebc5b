local T = require("harness")
require("ghost_cases")("builtin")
T.run(120000)
