local T = require("harness")
require("pause_cases")("fallback")
T.run(120000)
