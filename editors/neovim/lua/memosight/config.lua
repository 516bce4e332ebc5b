--- Plugin options: defaults, validation and the merged result.
---
--- `settings` is the server's settings tree in its wire form (camelCase keys), sent as
--- initializationOptions and answered to workspace/configuration; the server owns the defaults,
--- so only what the user sets travels.

---@alias memosight.GhostTextPath "auto"|"builtin"|"fallback"

---@class memosight.Keymaps
---@field accept string|false Accept the whole suggestion (insert mode).
---@field accept_word string|false Accept the next word of the suggestion.
---@field accept_line string|false Accept the rest of the suggestion's current line.
---@field dismiss string|false Hide the suggestion until the next edit.
---@field next_suggestion string|false Show the next item of the last answer (no new request).
---@field prev_suggestion string|false Show the previous item of the last answer.

---@class memosight.NextEditKeymaps
---@field apply string|false Jump to the proposed next edit and apply it (normal and insert mode).
---@field dismiss string|false Hide the proposed next edit until the next change.

---@class memosight.NextEditConfig
---@field enabled boolean Ask for and show next-edit proposals (memosight/nextEdit).
---@field debounce_ms integer Pause after an edit (or after leaving insert mode) before asking.
---@field keymaps memosight.NextEditKeymaps Keys; false leaves the key alone.

---@class memosight.Config
---@field cmd string[]|fun(dispatchers: table): table Command that starts the server over stdio,
--- or a function such as vim.lsp.rpc.connect("127.0.0.1", 2087) for a server on TCP.
---@field filetypes string[] Filetypes the server attaches to.
---@field root_markers string[] Files that mark a project root.
---@field settings table Server settings tree (camelCase, as in the server's config.py).
---@field ghost_text memosight.GhostTextPath Who draws the ghost text.
---@field debounce_ms integer Wait after typing before asking (own ghost text only).
---@field keymaps memosight.Keymaps Insert-mode keys; false leaves the key alone.
---@field next_edit memosight.NextEditConfig Next-edit proposals.

---@class memosight.UserConfig
---@field cmd? string[]|fun(dispatchers: table): table
---@field filetypes? string[]
---@field root_markers? string[]
---@field settings? table
---@field ghost_text? memosight.GhostTextPath
---@field debounce_ms? integer
---@field keymaps? table<string, string|false>
---@field next_edit? {enabled?: boolean, debounce_ms?: integer, keymaps?: table<string, string|false>}

local M = {}

---@type memosight.Config
M.defaults = {
  cmd = { "memosight-lsp" },
  filetypes = {
    "python", "c", "cpp", "cs", "go", "java", "javascript", "javascriptreact", "kotlin", "lua",
    "php", "ruby", "rust", "scala", "sh", "swift", "typescript", "typescriptreact", "zig",
  },
  root_markers = { ".git", "pyproject.toml", "setup.py", "package.json", "go.mod", "Cargo.toml" },
  settings = {},
  ghost_text = "auto",
  debounce_ms = 150,
  -- All off: accepting with <Tab> or similar would clash with completion menus and snippets.
  keymaps = {
    accept = false, accept_word = false, accept_line = false, dismiss = false,
    next_suggestion = false, prev_suggestion = false,
  },
  -- On, with no key mapped (as above): :MemoSightNextEdit applies, and the accept key applies
  -- when no completion ghost is shown. The pause is longer than the completions' because an
  -- answer rewrites a window of lines, and a proposal mid-word would only distract.
  next_edit = { enabled = true, debounce_ms = 400, keymaps = { apply = false, dismiss = false } },
}

--- Schema of the server settings tree: a type name, or a list of allowed strings. A hand copy
--- of memosight_lsp/config.py (keys, types, choices); tests/test_neovim.py fails when they drift.
M.settings_schema = {
  enable = "boolean",
  languages = "table",
  model = {
    path = "string?",
    device = { "auto", "cpu", "cuda" },
    dtype = { "auto", "float32", "bfloat16", "float16" },
    quantization = { "auto", "none", "int8", "int4", "gguf" },
    fimFormat = "string",
    backend = { "local", "vllm", "llama.cpp", "ollama", "openai" },
    url = "string?",
    name = "string?",
    apiKeyEnv = "string?",
    timeoutMs = "number",
    allowPickle = "boolean",
  },
  completion = {
    maxNewTokens = "number",
    multiline = { "auto", "always", "never" },
    midWord = { "complete", "skip" },
    debounceMs = "number",
    speculative = "boolean",
    typeThrough = "boolean",
    precomputeNext = "boolean",
    firstResponseMs = "number",
    maxWaitMs = "number",
    alternatives = "number",
    lineStartReading = { "choose", "above", "around" },
  },
  context = {
    budgetTokens = "number",
    crossFile = "boolean",
    crossFileShare = "number",
    similarSnippets = "number",
    crossFileGate = "boolean",
  },
  compression = {
    kvCompression = { "off", "lossless-draft", "lossy-snapkv" },
    kvRatio = "number",
    minPromptTokens = "number",
  },
  nextEdit = {
    promptFormat = { "auto", "chat", "plain", "zeta", "sweep" },
    prewarm = "boolean",
  },
}

---@param name string
---@return string
local function snake_to_camel(name)
  return (name:gsub("_(%l)", string.upper))
end

--- vim.validate with the 0.11+ signature, falling back to the 0.10 table form.
---@param name string
---@param value any
---@param validator string|string[]|fun(v: any): boolean, string?
---@param optional? boolean
---@param message? string
local function check(name, value, validator, optional, message)
  if vim.fn.has("nvim-0.11") == 1 then
    vim.validate(name, value, validator, optional, message)
  elseif type(validator) == "function" then
    -- 0.10's table form takes either `optional` or a message for function validators.
    vim.validate({
      [name] = {
        value,
        function(v)
          return (optional and v == nil) or validator(v)
        end,
        message,
      },
    })
  else
    vim.validate({ [name] = { value, validator, optional } })
  end
end

---@param list any
---@return boolean
local function is_string_list(list)
  if type(list) ~= "table" then
    return false
  end
  for i, item in pairs(list) do
    if type(i) ~= "number" or type(item) ~= "string" then
      return false
    end
  end
  return true
end

---@param given table
---@param schema table
---@param path string
local function check_settings(given, schema, path)
  for key, value in pairs(given) do
    local where = path .. "." .. tostring(key)
    local rule = schema[key]
    if rule == nil then
      local camel = type(key) == "string" and snake_to_camel(key) or nil
      local hint = camel and schema[camel] ~= nil and (" (did you mean '" .. camel .. "'?)") or ""
      error(("unknown option '%s'%s"):format(where, hint), 0)
    elseif type(rule) == "table" and vim.islist(rule) then
      check(where, value, function(v)
        return vim.tbl_contains(rule, v)
      end, false, "one of " .. table.concat(rule, ", "))
    elseif type(rule) == "table" then
      check(where, value, "table")
      check_settings(value, rule, where)
    elseif rule:sub(-1) == "?" then
      if value ~= vim.NIL then -- vim.NIL is sent as null (model.path = vim.NIL: the embedded model)
        check(where, value, rule:sub(1, -2), true)
      end
    else
      check(where, value, rule)
    end
  end
end

--- Checks a table of keys against the known actions: each a key (string) or false.
---@param given any
---@param known table<string, string|false>
---@param path string
local function check_keymaps(given, known, path)
  check(path, given, "table", true)
  for name, lhs in pairs(given or {}) do
    if known[name] == nil then
      error(("unknown option '%s.%s'"):format(path, tostring(name)), 0)
    end
    check(path .. "." .. name, lhs, function(v)
      return v == false or (type(v) == "string" and v ~= "")
    end, false, "a key (string) or false")
  end
end

--- Checks user options; raises an error whose message names the bad option.
---@param opts memosight.UserConfig
local function validate(opts)
  for key in pairs(opts) do
    if M.defaults[key] == nil then
      error(("unknown option '%s'"):format(tostring(key)), 0)
    end
  end
  check("cmd", opts.cmd, function(v)
    return (is_string_list(v) and #v > 0) or type(v) == "function"
  end, true, "a non-empty list of strings, or a function")
  check("filetypes", opts.filetypes, is_string_list, true, "a list of strings")
  check("root_markers", opts.root_markers, is_string_list, true, "a list of strings")
  check("settings", opts.settings, "table", true)
  check("ghost_text", opts.ghost_text, function(v)
    return v == "auto" or v == "builtin" or v == "fallback"
  end, true, "one of auto, builtin, fallback")
  check("debounce_ms", opts.debounce_ms, function(v)
    return type(v) == "number" and v >= 0
  end, true, "a number >= 0")
  check_keymaps(opts.keymaps, M.defaults.keymaps, "keymaps")
  check("next_edit", opts.next_edit, "table", true)
  local next_edit = opts.next_edit or {}
  for key in pairs(next_edit) do
    if M.defaults.next_edit[key] == nil then
      error(("unknown option 'next_edit.%s'"):format(tostring(key)), 0)
    end
  end
  check("next_edit.enabled", next_edit.enabled, "boolean", true)
  check("next_edit.debounce_ms", next_edit.debounce_ms, function(v)
    return type(v) == "number" and v >= 0
  end, true, "a number >= 0")
  check_keymaps(next_edit.keymaps, M.defaults.next_edit.keymaps, "next_edit.keymaps")
  check_settings(opts.settings or {}, M.settings_schema, "settings")
end

--- Validated options merged over the defaults.
---@param opts? memosight.UserConfig
---@return memosight.Config
function M.resolve(opts)
  opts = opts or {}
  check("opts", opts, "table")
  local ok, err = pcall(validate, opts)
  if not ok then
    -- vim.validate prefixes its own file:line, which tells the user nothing.
    local message = tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")
    error("memosight: " .. message, 0)
  end
  local merged = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts)
  -- Lists replace rather than merge element-wise.
  for _, key in ipairs({ "cmd", "filetypes", "root_markers" }) do
    if opts[key] then
      merged[key] = type(opts[key]) == "table" and vim.deepcopy(opts[key]) or opts[key]
    end
  end
  return merged
end

return M
