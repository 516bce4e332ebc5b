local T = require("harness")
require("next_edit_cases")("builtin")
T.run(120000)
