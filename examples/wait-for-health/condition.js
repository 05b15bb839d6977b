// A condition wait: matches once the health-check service (examples/health-check) answers
// GET /health with 200, and hands its answer to the follow-up as the payload.
async ({ ctx }) => {
  let answer;
  try {
    answer = await ctx.fetch('http://127.0.0.1:8787/health');
  } catch (e) {
    return false; // not listening yet: checked again after the interval
  }
  if (answer.status !== 200) return false;
  return { resumeText: 'health-check answers 200', payload: JSON.parse(answer.body) };
}
