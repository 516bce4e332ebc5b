local T = require("harness")
require("pause_cases")("builtin")
T.run(120000)
