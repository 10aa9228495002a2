--[[
include-code.lua -- the Pandoc filter that weaves the paper from the tested sources.

Chapters never type a listing by hand. They name a region of a source file:

    ```include
    src/cpu/stage2_online_softmax.c#online-update
    ```

and this filter replaces the block with the lines between the markers
`//> online-update` and `//< online-update` of that file (both marker lines
dropped; the marker line of a region nested inside shown blank, so that each
line keeps its number in the file), captioned with the file, the lines, and
the function(s) it sits in. Files whose comments start
with '#' (Python, shell, gnuplot, make) may mark regions `#> name` ... `#< name`
as well; a Python caption names the top-level functions and classes. Paths are relative to the
directory pandoc runs in (the repository root).

It also does three small things the chapters need:

  [key]{.m}                       a value measured by paper/gen/claims.py, read
                                  from the file named by the metadata field
                                  `values` (lines "key<TAB>value"); an unknown
                                  key fails the build. A value with TeX math
                                  in it ($2^{24}$) is parsed as Markdown, any
                                  other stands as plain text.
  [key]{.q}                       a quotation from the same file (claims.py's
                                  QUOTES: the words, then where they stand),
                                  parsed as Markdown in place.
  ::: {.include-md file="F"} :::  the Markdown file F parsed in place (used for
                                  the generated claims table).
  ::: {.requires file="F" data="D"} ...
                                  the contents only when F exists; otherwise a
                                  one-line note that D (default F) is absent, so
                                  the build never fails for lack of GPU data.

  ::: {.exercise n="2"} :::       exercise 2 in place: exercises/ex2/statement.md
                                  (its headings two levels down), then how to
                                  check it. In the instructor's edition
                                  (metadata `solutions: true`, make
                                  paper-solutions) also the reference
                                  solution, the model answers and the
                                  checker's rules, all read from
                                  exercises/solutions/ex2/ and the opening
                                  comment of exercises/ex2/check.c: one
                                  source, no copies.
  ::: {.instructor comment-of="F"} :::
                                  contents shown only in the instructor's
                                  edition, followed by the opening comment of
                                  the C file F when given.
  ::: {.learner} :::              contents shown only in the learner's
                                  edition (what stands there instead of an
                                  exercise's answer); [text]{.learner} and
                                  [text]{.instructor} the same inline.
  ::: {.include-md file="F" solutions-file="G"} :::
                                  as include-md, G in the instructor's
                                  edition (the claims table with the
                                  exercises' answers).
  ::: {.part #id title="T"} :::   a part of the book: "Part I. T" (\part in
                                  LaTeX, an unnumbered top heading in HTML);
                                  the parts are numbered I, II, ... in order,
                                  and [](#id) gives the part's numeral.
  ::: {.appendix} :::             the chapters after it are appendices
                                  (\appendix in LaTeX: lettered A, B, ...;
                                  HTML numbers them on).
  [](#id)                         the number of the part, chapter or section whose
                                  heading carries {#id}: \ref{id} in LaTeX,
                                  the number HTML gives it otherwise. An empty
                                  link to an id no heading has fails the
                                  build; chapters never type a number
                                  (tests/paper_refs.py). A figure's id is
                                  its image's {#fig:name}; a table's, a
                                  caption ending "{#tbl:name}" (taken off
                                  the caption, a \label in LaTeX).

Errors (missing file, missing region, region marked twice, unclosed region,
unknown value) stop the build with a message naming the file and the region.
--]]

local values = nil       -- key -> string, loaded on first use
local values_file = nil  -- path, from the metadata
local solutions = false  -- the instructor's edition, from the metadata
local parts = 0          -- parts seen so far (for their numerals in HTML)
local part_numbers = {}  -- a part's id -> its numeral

local function fail(msg)
  io.stderr:write("include-code.lua: error: " .. msg .. "\n")
  error("include-code.lua: " .. msg, 0)
end

local function read_lines(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local lines = {}
  for line in f:lines() do lines[#lines + 1] = line end
  f:close()
  return lines
end

local function file_exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

-- A marker line: optional indentation, "//>" or "//<", a space, the name;
-- in a '#'-comment file (hash true) "#>" or "#<" too.
local function marker(line, hash)
  local kind, name = line:match("^%s*//([<>])%s+([%w_%-%.]+)%s*$")
  if not kind and hash then
    kind, name = line:match("^%s*#([<>])%s+([%w_%-%.]+)%s*$")
  end
  return kind, name
end

local function hash_comments(path)
  return path:match("%.py$") or path:match("%.sh$") or path:match("%.gp$") or
         path:match("%.mk$") or path:match("Makefile$")
end

-- Python: the name and kind ("function" or "class") of a top-level def or
-- class opened at lines[i], or nil.
local function python_defined(lines, i)
  local name = lines[i]:match("^def%s+([%w_]+)%s*%(")
  if name then return name, "function" end
  name = lines[i]:match("^class%s+([%w_]+)")
  if name then return name, "class" end
  return nil
end

-- The name of the C function a definition line opens, or nil. A definition
-- starts in column 0 with a type, has "name(" on the line and does not end
-- in ";" (a prototype). FN(name) is stage 1's type-generic spelling.
local NOT_A_NAME = {["if"] = true, ["for"] = true, ["while"] = true, ["switch"] = true,
                    ["return"] = true, ["sizeof"] = true}

-- The first identifier followed by "(" that can be a function's name:
-- attributes such as __launch_bounds__(...) or __attribute__((...)) are not.
local function first_name(text)
  for candidate in text:gmatch("([%a_][%w_]*)%s*%(") do
    if not NOT_A_NAME[candidate] and not candidate:match("^__") then return candidate end
  end
  return nil
end

-- The name of the C/CUDA function a definition opens at lines[i], or nil. A
-- definition starts in column 0 with a type, names the function (on this
-- line, or on the next, indented, after "__global__ void __launch_bounds__(...)")
-- and does not end in ";" (a prototype). FN(name) is stage 1's
-- type-generic spelling.
local function function_defined(lines, i)
  local line = lines[i]
  if not line:match("^[%a_]") then return nil end
  if line:match("^#") or line:match(";%s*$") then return nil end
  if line:match("^typedef") or line:match("^struct%s+[%w_]+%s*{") then return nil end
  if line:match("^template%s*<") then return nil end
  local fn = line:match("FN%(([%w_]+)%)%s*%(")
  if fn then return fn end
  local name = first_name(line)
  if name then return name end
  local nxt = lines[i + 1]
  if nxt and line:match("^__global__") or (nxt and line:match("^__device__")) then
    return first_name(nxt)
  end
  return nil
end

-- Cut region `name` out of `path`: returns the code and a caption string.
local function cut_region(path, name)
  local lines = read_lines(path)
  if not lines then
    fail(string.format("%s#%s: cannot read the file %s", path, name, path))
  end
  local hash = hash_comments(path)
  local defined_at = path:match("%.py$") and python_defined or
                     function(ls, i) local f = function_defined(ls, i); return f, f and "function" end
  local mark = hash and "#>" or "//>"
  local at = {}   -- at[">"]: the line that opens the region, at["<"]: the one that closes it
  local verb = {[">"] = "opened", ["<"] = "closed"}
  for i, line in ipairs(lines) do
    local kind, n = marker(line, hash)
    if n == name then
      if at[kind] then
        fail(string.format("%s#%s: region '%s' is %s twice in %s (lines %d and %d)",
                           path, name, name, verb[kind], path, at[kind], i))
      end
      at[kind] = i
    end
  end
  local open_at, close_at = at[">"], at["<"]
  if not open_at then
    fail(string.format("%s#%s: no region '%s' in %s (no line '%s %s')",
                       path, name, name, path, mark, name))
  end
  if not close_at or close_at < open_at then
    fail(string.format("%s#%s: region '%s' in %s is never closed after line %d",
                       path, name, name, path, open_at))
  end
  local body, defined, kinds = {}, {}, {}
  for i = open_at + 1, close_at - 1 do
    local line = lines[i]
    if marker(line, hash) then
      -- a region nested inside: its marker stands as a blank line, so that
      -- every line keeps its number in the file
      body[#body + 1] = ""
    else
      body[#body + 1] = line
      local fn, kind = defined_at(lines, i)
      if fn then defined[#defined + 1] = fn; kinds[#kinds + 1] = kind end
    end
  end
  -- trim blank lines at both ends (the first line shown keeps its number)
  local first = open_at + 1
  while #body > 0 and body[1]:match("^%s*$") do table.remove(body, 1); first = first + 1 end
  while #body > 0 and body[#body]:match("^%s*$") do table.remove(body) end
  if #body == 0 then
    fail(string.format("%s#%s: region '%s' in %s is empty", path, name, name, path))
  end
  local where
  local only_functions = true
  for _, kind in ipairs(kinds) do only_functions = only_functions and kind == "function" end
  if #defined > 0 and only_functions then
    local names = {}
    for _, fn in ipairs(defined) do names[#names + 1] = fn .. "()" end
    where = (#names == 1 and "function " or "functions ") .. table.concat(names, ", ")
  elseif #defined > 0 then
    local items = {}
    for k, fn in ipairs(defined) do
      items[#items + 1] = kinds[k] == "class" and ("class " .. fn) or ("function " .. fn .. "()")
    end
    where = table.concat(items, ", ")
  else
    -- a region inside a function body: the last definition above it
    local enclosing, kind = nil, nil
    for i = open_at - 1, 1, -1 do
      enclosing, kind = defined_at(lines, i)
      if enclosing then break end
    end
    where = enclosing and (kind == "class" and ("inside class " .. enclosing)
                           or ("inside " .. enclosing .. "()")) or "file scope"
  end
  local caption = string.format("%s, lines %d-%d, %s", path, first, first + #body - 1, where)
  return table.concat(body, "\n"), caption, first
end

local function language_of(path)
  if path:match("%.[ch]$") then return "c" end
  if path:match("%.cu$") or path:match("%.cuh$") then return "cpp" end
  if path:match("%.py$") then return "python" end
  if path:match("%.gp$") then return "gnuplot" end
  if path:match("%.sh$") then return "bash" end
  return nil
end

function CodeBlock(block)
  if not block.classes:includes("include") then return nil end
  local ref = block.text:gsub("^%s+", ""):gsub("%s+$", "")
  local path, name = ref:match("^([^#%s]+)#([%w_%-%.]+)$")
  if not path then
    fail("bad include reference '" .. ref .. "': expected FILE#REGION")
  end
  local code, caption, first = cut_region(path, name)
  local classes = {}
  local lang = language_of(path)
  if lang then classes[1] = lang end
  classes[#classes + 1] = "numberLines"   -- numbered as in the source file
  local listing = pandoc.CodeBlock(code, pandoc.Attr("", classes,
                                   {{"startFrom", tostring(first)}}))
  local cap = pandoc.Para({pandoc.Strong({pandoc.Str("Listing.")}), pandoc.Space(),
                           pandoc.Code(path .. "#" .. name), pandoc.Str(":"), pandoc.Space(),
                           pandoc.Str(caption:sub(#path + 3))})
  -- keep the caption on the same page as the first lines of its listing
  return pandoc.Div({cap, pandoc.RawBlock("latex", "\\nopagebreak"), listing},
                    pandoc.Attr("", {"listing"}, {{"region", ref}}))
end

local function load_values()
  if values then return values end
  values = {}
  if not values_file then fail("a [key]{.m} value is used but the metadata names no 'values' file") end
  local lines = read_lines(values_file)
  if not lines then fail("cannot read the values file " .. values_file .. " (run paper/gen/claims.py)") end
  for _, line in ipairs(lines) do
    local k, v = line:match("^([^\t]+)\t(.*)$")
    if k then values[k] = v end
  end
  return values
end

function Span(span)
  -- [text]{.learner} / [text]{.instructor}: inline text of one edition only
  if span.classes:includes("learner") then
    if solutions then return {} end
    return span.content
  end
  if span.classes:includes("instructor") then
    if not solutions then return {} end
    return span.content
  end
  local quote = span.classes:includes("q")
  if not span.classes:includes("m") and not quote then return nil end
  local key = pandoc.utils.stringify(span.content)
  local v = load_values()[key]
  if v == nil then fail("unknown " .. (quote and "quotation" or "measured value") .. " '" .. key ..
                        "' (not in " .. values_file .. ")") end
  if not quote and not v:find("%$") then return pandoc.Str(v) end
  -- a quotation is Markdown (math, code) with its source, and a value with
  -- math is Markdown too: parsed in place
  local blocks = pandoc.read(v, "markdown").blocks
  if #blocks == 0 then return pandoc.Str("") end
  return pandoc.Span(blocks[1].content)
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

-- Markdown of a file without its leading HTML comment (the files' own
-- one-line description of themselves), headings moved `shift` levels down.
local function markdown_file(path, shift)
  local text = read_file(path)
  if not text then fail("cannot read " .. path) end
  text = text:gsub("^%s*<!%-%-.-%-%->%s*", "")
  local blocks = pandoc.read(text, "markdown").blocks
  return pandoc.Blocks(blocks):walk({Header = function(h)
    h.level = h.level + shift
    return h
  end})
end

-- The opening /* ... */ comment of a C file, without its " * " margins.
local function leading_comment(path)
  local text = read_file(path)
  if not text then fail("cannot read " .. path) end
  local body = text:match("^%s*/%*(.-)%*/")
  if not body then fail(path .. " opens with no comment to show as the checker's rules") end
  local lines = {}
  for line in (body .. "\n"):gmatch("(.-)\n") do
    lines[#lines + 1] = line:gsub("^ %* ?", ""):gsub("^ %*$", "")
  end
  while #lines > 0 and lines[1]:match("^%s*$") do table.remove(lines, 1) end
  while #lines > 0 and lines[#lines]:match("^%s*$") do table.remove(lines) end
  return table.concat(lines, "\n")
end

local function md(text)
  return pandoc.read(text, "markdown").blocks
end

local function exercise(n)
  local dir = "exercises/ex" .. n
  local blocks = markdown_file(dir .. "/statement.md", 2)
  blocks:extend(md("**How to check it.** Work in `" .. dir .. "/` (see `exercises/README.md`), " ..
    "then run `make exercise EX=" .. n .. "`: the checker marks each part right, wrong " ..
    "(with a hint, never the answer) or not answered yet" ..
    (file_exists(dir .. "/written.md") and ", and once you have written your answer to the " ..
      "written part and every marked part is right, it shows it beside a model answer." or ".")))
  if not solutions then return blocks end
  local sol = "exercises/solutions/ex" .. n
  blocks:extend(md("#### For the instructor: exercise " .. n .. " solved {-}"))
  local ls = io.popen("ls -1 " .. sol .. " 2>/dev/null")
  local names = {}
  for name in ls:lines() do names[#names + 1] = name end
  ls:close()
  if #names == 0 then fail("no reference solution in " .. sol) end
  table.sort(names, function(a, b)   -- answers first, then prose, then code
    local rank = function(x) return x == "answers.txt" and 1 or (x:match("%.md$") and 2 or 3) end
    if rank(a) ~= rank(b) then return rank(a) < rank(b) end
    return a < b
  end)
  for _, name in ipairs(names) do
    local path = sol .. "/" .. name
    if name:match("%.md$") then
      blocks:extend(md("Model answer, `" .. path .. "`:"))
      blocks:extend(markdown_file(path, 4))
    else
      local lang = name:match("%.[ch]$") and "c" or nil
      blocks:extend(md((name == "answers.txt" and "Reference answers" or "Reference code") ..
                       ", `" .. path .. "`:"))
      blocks:insert(pandoc.CodeBlock(read_file(path) or "", pandoc.Attr("", lang and {lang} or {})))
    end
  end
  blocks:extend(md("The checker's rules, from the opening comment of `" .. dir .. "/check.c`:"))
  blocks:insert(pandoc.CodeBlock(leading_comment(dir .. "/check.c")))
  return blocks
end

function Div(div)
  if div.classes:includes("exercise") then
    local n = div.attributes["n"]
    if not n or not n:match("^%d+$") then fail("an exercise block needs n=\"N\"") end
    return exercise(n)
  end
  if div.classes:includes("instructor") then
    if not solutions then return {} end
    local blocks = pandoc.Blocks(div.content)
    local src = div.attributes["comment-of"]
    if src then blocks:insert(pandoc.CodeBlock(leading_comment(src))) end
    return blocks
  end
  if div.classes:includes("learner") then
    if solutions then return {} end
    return pandoc.Blocks(div.content)
  end
  if div.classes:includes("include-md") then
    local path = (solutions and div.attributes["solutions-file"]) or div.attributes["file"]
    local f = path and io.open(path, "r")
    if not f then
      -- not an error yet: an enclosing {.requires} block may drop it (Divs
      -- are visited inner first); the last pass fails on what is left
      return pandoc.Div({}, pandoc.Attr("", {"include-md-missing"}, {{"file", tostring(path)}}))
    end
    local text = f:read("a")
    f:close()
    local blocks = pandoc.read(text, "markdown").blocks
    if FORMAT:match("latex") then
      -- let long paths in code wrap in narrow table cells: a zero-width space
      -- after each '/' and '_' (metadata.yaml maps it to \allowbreak); LaTeX only, so
      -- that a path copied from the HTML page has no hidden characters
      blocks = pandoc.Blocks(blocks):walk({Code = function(c)
        c.text = c.text:gsub("/", "/\u{200B}"):gsub("_", "_\u{200B}")
        return c
      end})
    end
    return blocks
  end
  if div.classes:includes("part") then
    parts = parts + 1
    local title = div.attributes["title"] or fail("a part needs title=\"...\"")
    local id = div.identifier ~= "" and div.identifier or ("part-" .. parts)
    local roman = ({"I", "II", "III", "IV", "V", "VI"})[parts] or tostring(parts)
    part_numbers[id] = roman
    if FORMAT:match("latex") then
      return pandoc.RawBlock("latex", "\\clearpage\\part{" .. title .. "}\\label{" .. id .. "}")
    end
    return pandoc.Header(1, pandoc.Inlines({pandoc.Str("Part " .. roman .. ". " .. title)}),
                         pandoc.Attr(id, {"unnumbered", "part"}, {{"part-number", roman}}))
  end
  if div.classes:includes("appendix") then
    if FORMAT:match("latex") then return pandoc.RawBlock("latex", "\\clearpage\\appendix") end
    -- HTML: a marker for heading_numbers, which letters the chapters after it
    return pandoc.Div({}, pandoc.Attr("", {"appendix-start"}))
  end
  if div.classes:includes("requires") then
    local path = div.attributes["file"]
    if path and file_exists(path) then return div.content end
    local data = div.attributes["data"] or path
    local note = "*(No `" .. tostring(data) .. "` in this build: what would stand here is skipped.)*"
    return pandoc.read(note, "markdown").blocks
  end
  return nil
end

function Meta(meta)
  if meta.values then values_file = pandoc.utils.stringify(meta.values) end
  if meta.solutions then solutions = pandoc.utils.stringify(meta.solutions) == "true" end
  return nil
end

-- Cross-references: every heading's id and number (as --number-sections
-- numbers them: unnumbered headings skipped, deeper levels reset) and every
-- figure's (in document order, as LaTeX counts them), then each empty link
-- [](#id) replaced by its number.
local function is_figure(b)
  return b.t == "Para" and #b.content == 1 and b.content[1].t == "Image" and
         b.content[1].title:match("^fig:") ~= nil
end

local function heading_numbers(blocks)
  local numbers, counts, figures, tables = {}, {0, 0, 0, 0, 0, 0}, 0, 0
  local lettered = false   -- after the appendix marker: A, B, ... (as LaTeX's \appendix)
  local function visit(bs)
    for _, b in ipairs(bs) do
      if b.t == "Header" and b.classes:includes("part") then
        numbers[b.identifier] = b.attributes["part-number"]
      elseif b.t == "Header" then
        if not b.classes:includes("unnumbered") and b.level <= 6 then
          counts[b.level] = counts[b.level] + 1
          for l = b.level + 1, 6 do counts[l] = 0 end
          local parts_of = {}
          for l = 1, b.level do parts_of[#parts_of + 1] = tostring(counts[l]) end
          if lettered then
            parts_of[1] = string.char(string.byte("A") + counts[1] - 1)
            b.attributes["number"] = table.concat(parts_of, ".")   -- the HTML writer's number
          end
          if b.identifier ~= "" then numbers[b.identifier] = table.concat(parts_of, ".") end
        end
      elseif is_figure(b) then
        figures = figures + 1
        local id = b.content[1].identifier
        if id ~= "" then numbers[id] = tostring(figures) end
      elseif b.t == "Table" and #b.caption.long > 0 then
        tables = tables + 1   -- as LaTeX counts them: captioned ones only (Tables gives the step of an uncaptioned one back)
        if b.identifier ~= "" then numbers[b.identifier] = tostring(tables) end
      elseif b.t == "Div" and b.classes:includes("appendix-start") then
        lettered = true
        counts[1] = 0
      elseif b.t == "Div" then
        visit(b.content)
      end
    end
  end
  visit(blocks)
  return numbers
end

local function CrossRefs(doc)
  local numbers = heading_numbers(doc.blocks)
  for id, roman in pairs(part_numbers) do numbers[id] = roman end
  return doc:walk({Link = function(link)
    if #link.content > 0 then return nil end
    local id = link.target:match("^#(.+)$")
    if not id then return nil end
    if not numbers[id] then
      fail("cross-reference [](#" .. id .. "): no numbered heading, figure or table has the id '" .. id .. "'")
    end
    if FORMAT:match("latex") then
      return pandoc.RawInline("latex", "\\ref{" .. id .. "}")
    end
    link.content = pandoc.Inlines({pandoc.Str(numbers[id])})
    return link
  end})
end

-- Meta first, so that the values file is known before any Span is seen;
-- Div before CodeBlock/Span so that absent-data sections are dropped whole.
local function MissingInclude(div)
  if div.classes:includes("include-md-missing") then
    fail("cannot read the Markdown file '" .. div.attributes["file"] .. "' to include")
  end
  return nil
end

-- LaTeX's longtable steps the table counter for every table, captioned or
-- not, so a table without a caption would use up a number and the captioned
-- ones would skip it: give the step back after each uncaptioned table.
--
-- A table's id: its caption ends "{#tbl:name}" (the Markdown reader takes no
-- attributes on a table), taken off the caption and made the table's
-- identifier, which [](#tbl:name) names; in LaTeX a \label in the caption.
local function table_id(tbl)
  local last = tbl.caption.long[#tbl.caption.long]
  if not last or not last.content or #last.content == 0 then return nil end
  local inl = last.content
  local id = inl[#inl].t == "Str" and inl[#inl].text:match("^{#(tbl:[%w:._-]+)}$")
  if not id then return nil end
  inl:remove(#inl)
  while #inl > 0 and (inl[#inl].t == "Space" or inl[#inl].t == "SoftBreak") do inl:remove(#inl) end
  if FORMAT:match("latex") then inl:insert(pandoc.RawInline("latex", "\\label{" .. id .. "}")) end
  return id
end

local function Tables(tbl)
  local id = table_id(tbl)
  if id then
    tbl.identifier = id
    return tbl
  end
  if not FORMAT:match("latex") or #tbl.caption.long > 0 then return nil end
  return {tbl, pandoc.RawBlock("latex", "\\addtocounter{table}{-1}")}
end

return {
  {Meta = Meta},
  {Div = Div},
  {CodeBlock = CodeBlock, Span = Span, Div = MissingInclude},
  {Table = Tables},
  {Pandoc = CrossRefs},
}
