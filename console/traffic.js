// Validation of a traffic split as the user types, with the rules the API
// applies (api/validation.cc validateTraffic) plus one it cannot know at
// admission: every named Revision must exist. Pure functions.

const DNS1035 = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;

// rows: [{revisionName, latestRevision, percent (string as typed), tag}]
// revisions: the names of the Service's existing Revisions.
// Returns {errors: [{row (index or -1 for the whole split), field, message}], sum}.
export function validateTraffic(rows, revisions) {
  const errors = [];
  const known = new Set(revisions);
  const tags = new Map();
  let sum = 0;
  if (rows.length === 0) errors.push({ row: -1, field: "", message: "at least one traffic target is needed" });
  rows.forEach((r, i) => {
    const text = String(r.percent).trim();
    if (!/^\d{1,3}$/.test(text) || Number(text) > 100) {
      errors.push({ row: i, field: "percent", message: "a whole number from 0 to 100" });
    } else {
      sum += Number(text);
    }
    if (!r.latestRevision) {
      if (!r.revisionName) errors.push({ row: i, field: "revisionName", message: "choose a Revision" });
      else if (!known.has(r.revisionName))
        errors.push({ row: i, field: "revisionName", message: `no Revision "${r.revisionName}"` });
    }
    const tag = (r.tag || "").trim();
    if (tag) {
      if (!DNS1035.test(tag)) {
        errors.push({ row: i, field: "tag", message: "lower-case letters, digits and '-', starting with a letter" });
      } else if (tags.has(tag)) {
        errors.push({ row: i, field: "tag", message: `tag "${tag}" is also on row ${tags.get(tag) + 1}` });
      } else {
        tags.set(tag, i);
      }
    }
  });
  if (rows.length > 0 && sum !== 100) errors.push({ row: -1, field: "", message: `percentages sum to ${sum}, want 100` });
  return { errors, sum };
}

// The spec.traffic list the API takes for the rows.
export function trafficSpec(rows) {
  return rows.map((r) => {
    const t = r.latestRevision ? { latestRevision: true } : { revisionName: r.revisionName, latestRevision: false };
    t.percent = Number(String(r.percent).trim());
    const tag = (r.tag || "").trim();
    if (tag) t.tag = tag;
    return t;
  });
}

// Maps an API field path ("spec.traffic[1].percent", "spec.traffic") to
// {row, field} of the editor; null when it is not about traffic.
export function trafficField(path) {
  const m = /^spec\.traffic(?:\[(\d+)\](?:\.(\w+))?)?$/.exec(path || "");
  if (!m) return null;
  return { row: m[1] === undefined ? -1 : Number(m[1]), field: m[2] || "" };
}
