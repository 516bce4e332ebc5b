--- The server's `memosight/status` notifications, kept for statuslines and the health check.
--- (The server shows errors to the user itself, through window/showMessage.)

local M = {}

---@class memosight.Status
---@field state "starting"|"loading"|"ready"|"disabled"|"error"|"stopped"
---@field message string
---@field model string?
---@field lastLatencyMs number?
---@field notice string? whenever the embedded model serves: "embedded fallback: no code model found" (or why)
---@field fix string? the one action that ends the fallback

---@type memosight.Status
local current = { state = "stopped", message = "server not started", model = nil, lastLatencyMs = nil }

---@return memosight.Status
function M.get()
  return vim.deepcopy(current)
end

--- Replaces the status and tells statuslines (User MemoSightStatus) to redraw.
---@param new memosight.Status
function M.set(new)
  current = {
    state = new.state,
    message = new.message or "",
    model = new.model ~= vim.NIL and new.model or nil,
    lastLatencyMs = new.lastLatencyMs ~= vim.NIL and new.lastLatencyMs or nil,
    notice = type(new.notice) == "string" and new.notice ~= "" and new.notice or nil,
    fix = type(new.fix) == "string" and new.fix ~= "" and new.fix or nil,
  }
  vim.api.nvim_exec_autocmds("User", { pattern = "MemoSightStatus", modeline = false })
end

--- Handler for the `memosight/status` notification.
---@param result memosight.Status
function M.handler(_, result)
  if type(result) == "table" and type(result.state) == "string" then
    M.set(result)
  end
end

--- A short text for statuslines, e.g. "MemoSight ready 42ms".
---@return string
function M.line()
  local text = "MemoSight " .. current.state
  if current.state == "ready" and current.lastLatencyMs then
    text = ("%s %dms"):format(text, math.floor(current.lastLatencyMs + 0.5))
  end
  return text
end

return M
