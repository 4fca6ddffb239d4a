// The merchant console's only script: the copy button next to a secret shown once (a new API key,
// a webhook signing secret). Without it the secret is still on the page to select and copy by hand.
"use strict";

document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("button[data-copy]") : null;
  if (button === null) {
    return;
  }
  const source = document.getElementById(button.dataset.copy);
  const status = document.getElementById(button.dataset.status);
  const say = (text) => {
    if (status !== null) {
      status.textContent = text;
    }
  };
  if (source === null || !navigator.clipboard) {
    say("Copying is not available here: select the text and copy it.");
    return;
  }
  navigator.clipboard.writeText(source.textContent.trim()).then(
    () => say("Copied to the clipboard."),
    () => say("Copying failed: select the text and copy it."),
  );
});

// The copy button is shown only where this script runs (it is hidden without it).
for (const button of document.querySelectorAll("button[data-copy]")) {
  button.hidden = false;
}
