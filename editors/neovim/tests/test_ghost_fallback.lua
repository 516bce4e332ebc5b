local T = require("harness")
local fallback = require("memosight.ghost.fallback")
local h = require("ghost_cases")("fallback")

local api = vim.api

T.test("drawn with extmarks: first line inline at the cursor, the rest as virtual lines", function()
  local ghost = h.ghost_at_return()
  local marks = api.nvim_buf_get_extmarks(0, fallback.ns, 0, -1, { details = true })
  T.eq(1, #marks, "extmarks")
  local _, row, col, details = unpack(marks[1])
  T.eq({ h.ROW - 1, #h.LINE }, { row, col }, "position")
  T.eq("inline", details.virt_text_pos, "first line placement")
  local lines = { details.virt_text[1][1] }
  for _, chunks in ipairs(details.virt_lines or {}) do
    lines[#lines + 1] = chunks[1][1]
  end
  T.eq(ghost, table.concat(lines, "\n"), "drawn text")
  T.eq(fallback.hl_group, details.virt_text[1][2], "highlight")
end)

T.test("typing the suggestion's next character keeps the rest on screen", function()
  local ghost = h.ghost_at_return()
  local first = ghost:sub(1, 1)
  if not first:match("[%w_%p]") or #ghost < 2 then
    T.log("# first character " .. vim.inspect(first) .. " cannot be typed plainly; case not exercised")
    return
  end
  local debounce = fallback.debounce_ms
  fallback.debounce_ms = 5000 -- no new answer may replace the kept one during the check
  local ok, err = pcall(function()
    T.feed(first)
    T.wait_for("typed", function()
      return api.nvim_buf_get_lines(0, 0, -1, false)[h.ROW] == h.LINE .. first
    end)
    T.eq(ghost:sub(2), require("memosight").ghost_text(), "ghost after typing")
  end)
  fallback.debounce_ms = debounce
  assert(ok, err)
end)

T.run(120000)
