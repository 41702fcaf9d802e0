// Shared by the annotator's browser components (prepended to each one's module; components v2 load one script).

// True when the key event comes from a text box: keys typed there never act on the player or recorder.
function typing(event) {
  const path = event.composedPath ? event.composedPath() : [event.target];
  for (const node of path) {
    if (!node || !node.tagName) continue;
    const tag = node.tagName.toUpperCase();
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || node.isContentEditable) return true;
    if (node.getAttribute && node.getAttribute("role") === "textbox") return true;
  }
  return false;
}

function el(root, sel) {
  return root.querySelector(sel);
}
