local T = require("harness")
require("next_edit_cases")("fallback")
T.run(120000)
