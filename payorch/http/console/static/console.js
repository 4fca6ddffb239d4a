// The merchant console's only script. Every page works without it; it adds two things:
// - the copy button next to a secret shown once (a new API key, a webhook signing secret); without
//   it the secret is still on the page to select and copy by hand;
// - times in the browser's own time zone: the server writes each in UTC (`display.py`), and the
//   exact value stays in the element's `datetime` and on hover.
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

// "25 Nov 2026, 21:14 CET": the server's form of a time, in the time zone the browser is in.
const localTime = new Intl.DateTimeFormat("en-GB", {
  day: "numeric",
  month: "short",
  year: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  hourCycle: "h23",
  timeZoneName: "short",
});
for (const element of document.querySelectorAll("time[datetime]")) {
  const moment = new Date(element.dateTime);
  if (Number.isNaN(moment.getTime())) {
    continue;
  }
  const part = Object.fromEntries(localTime.formatToParts(moment).map((item) => [item.type, item.value]));
  element.textContent = `${part.day} ${part.month} ${part.year}, ${part.hour}:${part.minute} ${part.timeZoneName}`;
}
