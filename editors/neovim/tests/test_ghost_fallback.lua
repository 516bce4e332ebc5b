local T = require("harness")
require("ghost_cases")("fallback")
T.run(120000)
